/**
 * The server flags of the fault tests: a heartbeat every 200 ms and an attempt lost after 1 s of
 * silence, a 200 ms tick and a 300 ms kill grace, so a lost or killed attempt is seen in about a
 * second rather than the defaults' minutes.
 */
export const FAST_FAULT_FLAGS: readonly string[] = [
  ...['--heartbeat-interval', '200ms', '--heartbeat-threshold', '1s'],
  ...['--tick-interval', '200ms', '--kill-grace', '300ms'],
];

/**
 * The flags of the graceful-stop tests: a leader replaced within about a second, agents' keepalive
 * each second and an attempt lost after `thresholdMs` (Welcome.max_reconnect_backoff is a quarter).
 */
export function gracefulStopFlags(thresholdMs: number): string[] {
  return [
    ...['--leader-watchdog', '1s', '--tick-interval', '200ms'],
    ...['--heartbeat-interval', '1s', '--heartbeat-threshold', `${thresholdMs}ms`],
  ];
}
