import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { expect } from 'vitest';
import { cli, waitFor, type AgentProcess } from './leoflow-process.js';
import type { AgentsOfEachTest, ServerFixture } from './server-fixture.js';

/** A task running on an agent of its own, as `startLedgerTask` leaves it. */
export interface LedgerTask {
  /** The file the task appends its life to: "start TRY PID …" first. */
  ledger: string;
  /** The agent's state directory. */
  stateDir: string;
  /** The agent that runs try 1. */
  first: AgentProcess;
  runId: string;
  /** Try 1's process (its group is killed after the test). */
  pid: number;
  /** The ledger's lines so far. */
  lines(): Promise<string[]>;
}

/**
 * Applies a one-task DAG `name` whose task runs `script` (shell lines, the first appending
 * "start $LEOFLOW_TRY_NUMBER $$ …" to `ledger`) on the agent labelled zone=`name` alone, starts
 * that agent with a state directory of its own, triggers a run and waits until try 1 started.
 */
export async function startLedgerTask(
  f: ServerFixture,
  agents: AgentsOfEachTest,
  o: { name: string; retries: number; script: (ledger: string) => string[] },
): Promise<LedgerTask> {
  const { name } = o;
  const ledger = path.join(f.tmp, `${name}.ledger`);
  const stateDir = path.join(f.tmp, `${name}.state`);
  const file = path.join(f.tmp, `${name}.yaml`);
  await writeFile(
    file,
    [
      `dag_id: ${name}`,
      'tasks:',
      '  - id: work',
      '    executor: agents',
      `    placement: { labels: { zone: ${name} } }`,
      `    command: ["sh", "-c", ${JSON.stringify(o.script(ledger).join('; '))}]`,
      `    retries: ${o.retries}`,
      '    retry_delay: 100ms',
      '',
    ].join('\n'),
  );
  const applied = await cli(f.server.url, ['dag', 'apply', file]);
  expect(applied.code, applied.stderr).toBe(0);
  const first = await agents.connect(name, ['--labels', `zone=${name}`, '--state-dir', stateDir]);
  const runId = (await f.api.workflow.triggerRun({ dagId: name })).run!.runId;
  const lines = async () => (await readFile(ledger, 'utf8').catch(() => '')).split('\n').filter((l) => l !== '');
  const started = await waitFor(
    'try 1 started',
    async () => (await lines()).find((l) => l.startsWith('start 1 ')) ?? null,
  );
  const pid = Number(started.split(' ')[2]);
  agents.taskPids.add(pid);
  return { ledger, stateDir, first, runId, pid, lines };
}
