import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { expect } from 'vitest';
import { cli } from './leoflow-process.js';

/** A DAG as the lines of its YAML file: its top-level fields past `dag_id`, and its tasks' lines. */
export interface DagLines {
  dagId: string;
  /** Top-level lines written before `tasks:` (`max_active_runs: 8`, say). */
  top?: readonly string[];
  /** The lines under `tasks:`, each task starting `  - id: …`. */
  tasks: readonly string[];
}

/** The YAML text of `dag`. */
export function dagYaml(dag: DagLines): string {
  return [`dag_id: ${dag.dagId}`, ...(dag.top ?? []), 'tasks:', ...dag.tasks, ''].join('\n');
}

/**
 * Writes `dag` to `<dir>/<dagId>.yaml` and applies it with the real CLI's `leoflow dag apply`,
 * expecting it to be accepted. Resolves with the file's path.
 */
export async function applyDagFile(serverUrl: string, dir: string, dag: DagLines): Promise<string> {
  const file = path.join(dir, `${dag.dagId}.yaml`);
  await writeFile(file, dagYaml(dag));
  const applied = await cli(serverUrl, ['dag', 'apply', file]);
  expect(applied.code, applied.stderr).toBe(0);
  return file;
}

/** Triggers a run of `dagId` with the real CLI's `leoflow run trigger`, expecting success; resolves with its id. */
export async function triggerByCli(serverUrl: string, dagId: string): Promise<string> {
  const t = await cli(serverUrl, ['run', 'trigger', dagId, '-o', 'json']);
  expect(t.code, t.stderr).toBe(0);
  return JSON.parse(t.stdout).run_id as string;
}
