import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import { cli, startAgent, waitFor, type AgentProcess } from '../helpers/leoflow-process.js';
import { replicasForFile } from '../helpers/server-fixture.js';

/**
 * Event-driven stepping across replicas (issue #5): with a 30 s tick, only a nudge can make the
 * leader step in time. A run triggered through the API of the replica that does not lead, and
 * attempts ending on an agent connected to that replica, reach the leader over NOTIFY, which
 * plans just those runs at once.
 */

const TICK = ['--tick-interval', '30s', '--heartbeat-interval', '500ms', '--heartbeat-threshold', '10s'];

const f = replicasForFile({ tmpPrefix: 'leoflow-nudge-' });
const start = f.launcher(TICK);
let agent: AgentProcess | null = null;
afterAll(async () => {
  await agent?.stop();
});

function chainYaml(dagId: string, executor: string | null): string {
  const lines = [`dag_id: ${dagId}`, 'tasks:'];
  for (let i = 0; i < 3; i++) {
    lines.push(`  - id: t${i}`, '    command: ["true"]');
    if (executor) lines.push(`    executor: ${executor}`);
    if (i > 0) lines.push(`    depends_on: [t${i - 1}]`);
  }
  return lines.join('\n') + '\n';
}

async function runEnded(runId: string): Promise<{ state: string; ms: number }> {
  let out = { state: '', ms: 0 };
  await waitFor(
    `run ${runId} ended`,
    async () => {
      const [r] = await f.db.sql<{ state: string; ms: number }[]>`
      select state, extract(epoch from ended_at - created_at) * 1000 as ms from dag_runs where id = ${runId}`;
      out = { state: r!.state, ms: Number(r!.ms) };
      return r!.state === 'success' || r!.state === 'failed';
    },
    15_000,
    20,
  );
  return out;
}

describe('nudges across replicas', () => {
  it('a run triggered on the replica that does not lead, and ended on its agents, runs through at once', async () => {
    const a = await start(['--replica-id', 'lead']);
    const apiA = createClients(a.url);
    await waitFor('lead leads', async () => (await apiA.cluster.getLeader({})).leaderId === 'lead');
    const b = await start(['--replica-id', 'follow']);
    const apiB = createClients(b.url);
    expect((await apiB.cluster.getLeader({})).leaderId).toBe('lead');

    await writeFile(path.join(f.tmp, 'sub.yaml'), chainYaml('sub', null));
    await writeFile(path.join(f.tmp, 'viaagent.yaml'), chainYaml('viaagent', 'agents'));
    expect((await cli(b.url, ['dag', 'apply', f.tmp])).code).toBe(0);
    // The leader's first full step after the apply is up to a tick away: let it pass the empty
    // database once, so what follows can only be moved by nudges.
    await new Promise((r) => setTimeout(r, 500));

    // Triggered through the follower: its NOTIFY names the run; the leader runs all three tasks
    // (subprocess, on the leader), each end nudging the leader itself.
    const sub = (await apiB.workflow.triggerRun({ dagId: 'sub' })).run!.runId;
    const s = await runEnded(sub);
    expect(s.state).toBe('success');
    expect(s.ms).toBeLessThan(5_000);

    // An agent connected to the follower: every Finished lands on the follower, which tells the
    // leader which run to plan next.
    agent = startAgent(b.url, ['--id', 'follower-agent', '--slots', '1']);
    await waitFor('agent connected', async () =>
      (await apiB.cluster.listAgents({})).agents.some((x) => x.connected && x.connectedReplica === 'follow'),
    );
    const viaAgent = (await apiB.workflow.triggerRun({ dagId: 'viaagent' })).run!.runId;
    const v = await runEnded(viaAgent);
    expect(v.state).toBe('success');
    expect(v.ms).toBeLessThan(5_000);
    const agents = await f.db.sql<
      { agent_id: string | null }[]
    >`select distinct agent_id from task_instances where run_id = ${viaAgent}`;
    expect(agents.map((r) => r.agent_id)).toEqual(['follower-agent']);
  });
});
