import { spawnSync } from 'node:child_process';

/**
 * The real Prometheus tooling (Debian's `prometheus` package; `.ci/run` installs it). Where it is
 * missing a test that needs it is skipped, with the reason, except in CI, where it must run.
 */
export const PROMTOOL = spawnSync('promtool', ['--version'], { encoding: 'utf8' }).status === 0 ? 'promtool' : null;

export const promtoolMissing = PROMTOOL === null && process.env.CI !== 'true';

if (PROMTOOL === null && process.env.CI === 'true')
  throw new Error(
    'promtool is not installed: CI must run the alert-rule and metrics tests (apt-get install prometheus)',
  );

/** Runs promtool with `args` (and `input` on its stdin): its exit status and what it printed. */
export function promtool(args: string[], input?: string): { status: number | null; out: string } {
  const r = spawnSync(PROMTOOL ?? 'promtool', args, { encoding: 'utf8', input, timeout: 60_000 });
  return { status: r.status, out: `${r.stdout ?? ''}${r.stderr ?? ''}` };
}
