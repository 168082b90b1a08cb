import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { expect } from 'vitest';
import type { Sql } from '../../src/db/sql.js';
import { cli } from './leoflow-process.js';
import { runEnds } from './run-ends.js';

/**
 * Writes a DAG file (`source`, or its lines) into `dir`, named `fileName` or after its dag_id, and
 * applies it with `leoflow dag apply` on `serverUrl`; fails the test, with what the CLI said, if it
 * refuses. Resolves with the dag_id.
 */
export async function applyDag(
  serverUrl: string,
  dir: string,
  source: string | readonly string[],
  fileName?: string,
): Promise<string> {
  const text = typeof source === 'string' ? source : `${source.join('\n')}\n`;
  const dagId = /^dag_id: (\S+)/m.exec(text)?.[1];
  if (!dagId) throw new Error(`no dag_id in:\n${text}`);
  const file = path.join(dir, fileName ?? `${dagId}.yaml`);
  await writeFile(file, text);
  const applied = await cli(serverUrl, ['dag', 'apply', file]);
  expect(applied.code, applied.stderr + applied.stdout).toBe(0);
  return dagId;
}

/** `leoflow run trigger DAG -o json` with `extra` flags: the new run's id. */
export async function triggerByCli(serverUrl: string, dagId: string, extra: readonly string[] = []): Promise<string> {
  const r = await cli(serverUrl, ['run', 'trigger', dagId, '--output', 'json', ...extra]);
  expect(r.code, r.stderr).toBe(0);
  return String((JSON.parse(r.stdout) as { run_id: string }).run_id);
}

/** `applyDag`, then `triggerByCli` of that DAG: the new run's id. */
export async function applyAndTrigger(
  serverUrl: string,
  dir: string,
  source: string | readonly string[],
): Promise<string> {
  return triggerByCli(serverUrl, await applyDag(serverUrl, dir, source));
}

/** Waits for the run to end and expects success; when it did not succeed, says how each task ended. */
export async function expectRunSucceeds(sql: Sql, runId: string, timeoutMs: number): Promise<void> {
  const state = await runEnds(sql, runId, { timeoutMs });
  const tis = await sql`select task_id, state, error from task_instances where run_id = ${runId}`;
  expect(state, JSON.stringify(tis)).toBe('success');
}
