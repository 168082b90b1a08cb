import { describe, expect, it } from 'vitest';
import { serverForFile } from '../helpers/server-fixture.js';

/**
 * Issue 41, on-failure tasks: a task with `trigger_rule: one_failed` runs only when the run fails,
 * and is told what failed (LEOFLOW_RUN_FAILURES), on Lite with its defaults.
 */
const f = serverForFile({ tmpPrefix: 'leoflow-on-failure-' });

const DAG = (extract: string) => `dag_id: etl
tasks:
  - id: extract
    command: ["sh", "-c", "${extract}"]
  - id: load
    depends_on: [extract]
    command: ["true"]
  - id: on_failure
    depends_on: [extract, load]
    trigger_rule: one_failed
    command: ["sh", "-c", "printf '%s' \\"$LEOFLOW_RUN_FAILURES\\" > \\"$LEOFLOW_OUTPUT\\""]
`;

async function run(): Promise<{ runId: string; states: Record<string, string> }> {
  const runId = (await f.api.workflow.triggerRun({ dagId: 'etl' })).run!.runId;
  for (const until = Date.now() + 30_000; Date.now() < until;) {
    if ((await f.api.workflow.getRun({ runId })).run!.endedAt) {
      const rows = await f.db.sql<{ task_id: string; state: string }[]>`
        select task_id, state from task_instances where run_id = ${runId}`;
      return { runId, states: Object.fromEntries(rows.map((r) => [r.task_id, r.state])) };
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error('the run did not end');
}

describe('an on-failure task', () => {
  it('runs when the run fails, and reads what failed from LEOFLOW_RUN_FAILURES', async () => {
    await f.api.workflow.applyDag({ source: DAG('echo disk full >&2; exit 3'), filename: 'etl.yaml' });
    const { runId, states } = await run();
    expect(states).toMatchObject({ extract: 'failed', on_failure: 'success' });
    const { outputs } = await f.api.workflow.getTaskOutput({ runId, taskId: 'on_failure' });
    const failures = JSON.parse(outputs[0]!.json) as Record<string, unknown>[];
    expect(failures[0]).toMatchObject({ task_id: 'extract', state: 'failed', try_number: 1, exit_code: 3 });
    expect(failures.every((x) => x.state === 'failed' || x.state === 'upstream_failed')).toBe(true);
  });

  it('is skipped when nothing failed', async () => {
    await f.api.workflow.applyDag({ source: DAG('true'), filename: 'etl.yaml' });
    const { states } = await run();
    expect(states).toEqual({ extract: 'success', load: 'success', on_failure: 'skipped' });
  });
});
