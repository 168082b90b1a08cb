import { mkdir, rm } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { startLedgerTask } from '../helpers/ledger-task.js';
import { isAlive } from '../helpers/process-group.js';
import { waitFor } from '../helpers/leoflow-process.js';
import { runEnds } from '../helpers/run-ends.js';
import { agentsOfEachTest, serverForFile } from '../helpers/server-fixture.js';

/**
 * An agent SIGKILLed while its task runs, then started again with the same --id and an emptied
 * (or another) --state-dir, as a re-imaged node or a container without a volume would be. It
 * cannot re-attach to the task, so it must kill it before it says Hello: that Hello ends the old
 * attempt and the next try may start at once, here. The effect ledger is the task's own: every
 * execution appends "start", then a "tick" every 100 ms while it lives, then "end", each with its
 * time; two executions of the task are live at once if one ticks after the other started.
 */

const f = serverForFile({
  tmpPrefix: 'leoflow-agent-wiped-',
  args: ['--heartbeat-interval', '300ms', '--tick-interval', '200ms'],
});
const agents = agentsOfEachTest(f);

interface Entry {
  what: 'start' | 'tick' | 'end';
  tryNumber: number;
  at: number;
}

/** Each try's first and last sign of life in the ledger: the tries that overlap, said in words. */
function overlaps(entries: Entry[]): string[] {
  const span = new Map<number, { from: number; to: number }>();
  for (const e of entries) {
    const s = span.get(e.tryNumber);
    if (!s) span.set(e.tryNumber, { from: e.at, to: e.at });
    else s.to = Math.max(s.to, e.at);
  }
  const found: string[] = [];
  const tries = [...span.entries()].sort((a, b) => a[1].from - b[1].from);
  for (let i = 1; i < tries.length; i++) {
    const [prevTry, prev] = tries[i - 1]!;
    const [thisTry, cur] = tries[i]!;
    if (prev.to >= cur.from)
      found.push(
        `try ${prevTry} was live until ${prev.to}, after try ${thisTry} started at ${cur.from} (${prev.to - cur.from} ms)`,
      );
  }
  return found;
}

async function wipedRestart(name: string, nextStateDir: (old: string) => Promise<string>) {
  const { stateDir, first, runId, pid, lines } = await startLedgerTask(f, agents, {
    name,
    retries: 2,
    script: (ledger) => [
      `echo "start $LEOFLOW_TRY_NUMBER $$ $(date +%s%3N)" >> ${ledger}`,
      // Try 1 lives long enough to outlast the agent's restart; a later try is short.
      'i=0; n=10; [ "$LEOFLOW_TRY_NUMBER" = 1 ] && n=150',
      `while [ $i -lt $n ]; do echo "tick $LEOFLOW_TRY_NUMBER $$ $(date +%s%3N)" >> ${ledger}; sleep 0.1; i=$((i+1)); done`,
      `echo "end $LEOFLOW_TRY_NUMBER $$ $(date +%s%3N)" >> ${ledger}`,
    ],
  });

  first.child.kill('SIGKILL');
  await first.exited;
  expect(isAlive(pid)).toBe(true);
  // Until the server has seen the first stream gone it still lists the agent connected, and the
  // wait for the second's Hello below would end at once, before the second process has done anything.
  await waitFor(
    'the first agent seen gone',
    async () => !(await f.api.cluster.listAgents({})).agents.some((a) => a.agentId === name && a.connected),
    20_000,
  );
  const second = await agents.connect(name, ['--labels', `zone=${name}`, '--state-dir', await nextStateDir(stateDir)]);
  const aliveAfterHello = isAlive(pid);
  expect(await runEnds(f.db.sql, runId, { timeoutMs: 60_000 })).toBe('success');
  const entries = (await lines()).map((l) => {
    const [what, t, , at] = l.split(' ');
    return { what: what as Entry['what'], tryNumber: Number(t), at: Number(at) };
  });
  expect(overlaps(entries)).toEqual([]);
  // The task was gone before the agent said Hello, so before anything could start try 2.
  expect(aliveAfterHello).toBe(false);
  expect(entries.filter((e) => e.what === 'end').map((e) => e.tryNumber)).toEqual([2]);
  expect(second.output()).toContain('killed the tasks an earlier process of this agent left');
}

describe('an agent restarted without its state directory while its task runs', () => {
  it('with the state directory emptied: kills the old task before Hello; no two tries live at once', async () => {
    await wipedRestart('wiped', async (dir) => {
      await rm(dir, { recursive: true, force: true });
      await mkdir(dir, { recursive: true });
      return dir;
    });
  });

  it('with another state directory: the same', async () => {
    await wipedRestart('moved', async (dir) => `${dir}.elsewhere`);
  });
});
