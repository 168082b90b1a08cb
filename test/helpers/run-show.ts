import { expect } from 'vitest';
import { cli } from './leoflow-process.js';

/** A task instance as `leoflow run show -o json` prints it. */
export interface ShownTi {
  task_id: string;
  state: string;
  try_number: number;
  max_tries: number;
  exit_code: number | null;
  error: string | null;
  pending_reason: string | null;
}

/** A run as `leoflow run show -o json` prints it. */
export interface ShownRun {
  state: string;
  task_instances: ShownTi[];
}

/** `leoflow run show RUN -o json` on the server, parsed; fails the test if the CLI does. */
export async function showRun(serverUrl: string, runId: string): Promise<ShownRun> {
  const r = await cli(serverUrl, ['run', 'show', runId, '-o', 'json']);
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as ShownRun;
}

/** The run's id in what `leoflow run trigger` printed ("run 12 of …"). */
export function runIdOf(stdout: string): string {
  const m = /^run (\d+) of /m.exec(stdout);
  if (!m) throw new Error(`no run id in: ${stdout}`);
  return m[1]!;
}
