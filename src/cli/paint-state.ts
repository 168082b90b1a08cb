/**
 * A state's name in its colour, for a person at a terminal: green for success, red for failure,
 * cyan for running, yellow for a retry or a stale agent, and so on. Plain text when stdout is not
 * a terminal (a pipe, a file, CI), when NO_COLOR is set (https://no-color.org) or TERM is dumb;
 * `-o json` never calls it.
 */
const SGR: Record<string, string> = {
  success: '32',
  healthy: '32',
  failed: '31',
  upstream_failed: '31',
  dead: '31',
  running: '36',
  queued: '34',
  scheduled: '34',
  up_for_retry: '33',
  waiting: '33',
  stale: '33',
  cancelled: '35',
  skipped: '2',
  none: '2',
  stopped: '2',
};

let enabled: boolean | undefined;

/** True when what goes to stdout may carry colour. */
export function colourOnStdout(): boolean {
  return (enabled ??=
    Boolean(process.stdout.isTTY) && (process.env.NO_COLOR ?? '') === '' && process.env.TERM !== 'dumb');
}

export function paintState(name: string): string {
  const code = SGR[name];
  return code && colourOnStdout() ? `\x1b[${code}m${name}\x1b[0m` : name;
}
