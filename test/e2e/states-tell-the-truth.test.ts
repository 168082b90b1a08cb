import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { cli, startAgent, waitFor } from '../helpers/leoflow-process.js';
import { serverForFile } from '../helpers/server-fixture.js';
import { runIdOf } from '../helpers/run-show.js';

/**
 * Every state tells the truth (issue 33), as a user of Lite sees it with the real server and CLI
 * at their defaults: each try's log starts with its `started` line; a task whose only matching
 * agent drains says AGENT_DRAINING; an agent stopped with SIGTERM is listed as stopped.
 */

const WIDE = `dag_id: wide
tasks:
${['a', 'b', 'c', 'd', 'e'].map((t) => `  - id: ${t}\n    command: ["sh", "-c", "echo ${t}-err >&2; echo ${t}-out"]`).join('\n')}
`;

const GPU = `dag_id: gpu
tasks:
  - id: train
    executor: agents
    placement: { labels: { gpu: nvidia } }
    command: ["true"]
`;

interface ShownAgent {
  agent_id: string;
  health: string;
  connected: boolean;
  draining: boolean;
}

async function agentsList(): Promise<ShownAgent[]> {
  const r = await cli(f.server.url, ['agents', 'list', '-o', 'json']);
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout);
}

const f = serverForFile({ tmpPrefix: 'leoflow-truth-' });

beforeAll(async () => {
  await writeFile(path.join(f.tmp, 'wide.yaml'), WIDE);
  await writeFile(path.join(f.tmp, 'gpu.yaml'), GPU);
  const r = await cli(f.server.url, ['dag', 'apply', f.tmp]);
  expect(r.code, r.stderr).toBe(0);
}, 60_000);

describe('every state tells the truth', () => {
  it("prints each try's `started` line first in `leoflow logs`, then its output", async () => {
    for (let i = 0; i < 6; i++) {
      const t = await cli(f.server.url, ['run', 'trigger', 'wide', '--wait']);
      expect(t.code, t.stdout + t.stderr).toBe(0);
      const runId = runIdOf(t.stdout);
      const logs = await cli(f.server.url, ['logs', runId]);
      expect(logs.code, logs.stderr).toBe(0);
      for (const task of ['a', 'b', 'c', 'd', 'e']) {
        const mine = logs.stdout.split('\n').filter((l) => l.startsWith(`[${task} #1`));
        expect(mine[0], logs.stdout).toMatch(new RegExp(`^\\[${task} #1 leoflow\\] started pid \\d+: `));
        expect(mine.slice(1, 3).sort()).toEqual([`[${task} #1 stderr] ${task}-err`, `[${task} #1] ${task}-out`]);
        expect(mine.at(-1)).toBe(`[${task} #1 leoflow] exited with code 0`);
      }
    }
  }, 150_000);

  it('says AGENT_DRAINING while the only agents with the labels drain, and lists an agent stopped with SIGTERM as stopped', async () => {
    const agent = startAgent(f.server.url, ['--id', 'g1', '--labels', 'gpu=nvidia']);
    try {
      await waitFor('agent g1 healthy', async () =>
        (await agentsList()).find((a) => a.agent_id === 'g1' && a.health === 'healthy'),
      );
      const drained = await cli(f.server.url, ['agents', 'drain', 'g1']);
      expect(drained.code, drained.stderr).toBe(0);
      const t = await cli(f.server.url, ['run', 'trigger', 'gpu']);
      expect(t.code, t.stderr).toBe(0);
      const runId = runIdOf(t.stdout);
      const reason = async () => {
        const r = await cli(f.server.url, ['run', 'show', runId, '-o', 'json']);
        return (JSON.parse(r.stdout) as { task_instances: { pending_reason: string | null }[] }).task_instances[0]!
          .pending_reason;
      };
      expect(await waitFor('a pending reason', reason)).toBe('AGENT_DRAINING:1 agent with gpu=nvidia');

      // Stopped by its operator: it says goodbye (ends its stream) and is listed as stopped, not stale.
      expect((await agent.stop()).code).toBe(0);
      const gone = await waitFor('agent g1 disconnected', async () =>
        (await agentsList()).find((a) => a.agent_id === 'g1' && !a.connected),
      );
      expect(gone.health).toBe('stopped');
      const status = await cli(f.server.url, ['status']);
      expect(status.stdout).toMatch(/stopped/);
      // With no agent left at all, the task says so.
      await cli(f.server.url, ['run', 'cancel', runId]);
    } finally {
      await agent.stop();
    }
  }, 60_000);

  it('replays an ended run with each move at its own time, and gives a cleared run its wall time as duration', async () => {
    const t = await cli(f.server.url, ['run', 'trigger', 'wide', '--wait']);
    expect(t.code, t.stdout + t.stderr).toBe(0);
    const runId = runIdOf(t.stdout);
    await new Promise((r) => setTimeout(r, 1_500));
    const json = await cli(f.server.url, ['run', 'watch', runId, '-o', 'json']);
    expect(json.code, json.stderr).toBe(0);
    const events = json.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { kind: string; at: string; task_id?: string; to?: string; reason?: string | null });
    const pad = (n: number, w = 2) => String(n).padStart(w, '0');
    const clock = (d: Date) =>
      `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
    const replayedAt = Date.now();
    const plain = await cli(f.server.url, ['run', 'watch', runId]);
    expect(plain.code, plain.stderr).toBe(0);
    const moves = plain.stdout.split('\n').filter((l) => /^ {2}\d\d:\d\d:\d\d\.\d{3} {2}/.test(l));
    // One line per move of every task (and per reason it waited for), each at the time of its
    // event, none at the time of the replay.
    const tiMoves = events.filter((e) => e.kind === 'ti.state' || (e.kind === 'ti.pending' && e.reason));
    expect(tiMoves.filter((e) => e.kind === 'ti.state')).toHaveLength(20);
    expect(moves).toHaveLength(tiMoves.length);
    moves.forEach((line, i) => {
      const e = tiMoves[i]!;
      const what = e.kind === 'ti.state' ? `${e.to}\\b` : `\\w+\\s+${e.reason!.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`;
      expect(line).toMatch(
        new RegExp(`^ {2}${clock(new Date(e.at)).replaceAll('.', '\\.')} {2}${e.task_id}\\s+${what}`),
      );
      expect(Date.parse(e.at)).toBeLessThan(replayedAt - 1_000);
    });

    // Cleared a while after it ended: the run's duration is its wall time, first start to last end.
    // At least 2.6 s after it began, however fast the CLI calls above were (on a quiet machine the
    // run and the replays took 2.4 s in all, and the 2.5 s below failed).
    await new Promise((r) => setTimeout(r, Math.max(0, 2_600 - (Date.now() - Date.parse(events[0]!.at)))));
    const cleared = await cli(f.server.url, ['run', 'clear', runId, 'a']);
    expect(cleared.code, cleared.stderr).toBe(0);
    await waitFor(
      'the cleared run to end again',
      async () =>
        JSON.parse((await cli(f.server.url, ['run', 'show', runId, '-o', 'json'])).stdout).state === 'success',
    );
    const again = await cli(f.server.url, ['run', 'watch', runId]);
    expect(again.code, again.stderr).toBe(0);
    const wall = Date.now() - Date.parse(events[0]!.at);
    const m = new RegExp(`^run ${runId} success in (\\d+\\.\\d)s: `, 'm').exec(again.stdout);
    expect(m, again.stdout).not.toBeNull();
    expect(Number(m![1])).toBeGreaterThanOrEqual(2.5);
    expect(Number(m![1]) * 1000).toBeLessThanOrEqual(wall + 100);
    const show = await cli(f.server.url, ['run', 'show', runId]);
    expect(show.stdout).toMatch(/, duration (\d+\.\d)s\n/);
    expect(Number(/, duration (\d+\.\d)s\n/.exec(show.stdout)![1])).toBeGreaterThanOrEqual(2.5);
  }, 60_000);
});
