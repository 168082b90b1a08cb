/**
 * The server flags of the fault tests: a heartbeat every 200 ms and an attempt lost after 1 s of
 * silence, a 200 ms tick and a 300 ms kill grace, so a lost or killed attempt is seen in about a
 * second rather than the defaults' minutes.
 */
export const FAST_FAULT_FLAGS: readonly string[] = [
  ...['--heartbeat-interval', '200ms', '--heartbeat-threshold', '1s'],
  ...['--tick-interval', '200ms', '--kill-grace', '300ms'],
];
