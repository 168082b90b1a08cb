import { afterAll, describe, expect, it } from 'vitest';
import { cli, serverLauncher, waitFor, type ServerProcess } from '../helpers/leoflow-process.js';
import { agentsOfEachTest, serverForFile } from '../helpers/server-fixture.js';

/**
 * `leoflow status` and the agents' health as an operator reads them: a Lite server on its own
 * database, an agent that connects, is SIGKILLed, goes stale, then dead.
 */

/** Replicas that never lead (role worker), on the same database. */
const workers: ServerProcess[] = [];

interface Status {
  replica_id: string;
  leader: boolean;
  leader_id: string | null;
  live: boolean;
  ready: boolean;
  database: { reachable: boolean; latency_ms: number | null; migrations_version: string | null };
  agents: { healthy: number; stale: number; dead: number; stopped: number };
  dispatch_queue: { depth: number; capacity: number };
  last_full_step: { at: string; late_ms: number } | null;
  failed_checks: unknown[];
}

async function status(on: ServerProcess = f.server): Promise<Status> {
  const r = await cli(on.url, ['status', '-o', 'json']);
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as Status;
}

async function healthOf(agentId: string): Promise<string | undefined> {
  const r = await cli(f.server.url, ['agents', 'list', '-o', 'json']);
  return (JSON.parse(r.stdout) as { agent_id: string; health: string }[]).find((a) => a.agent_id === agentId)?.health;
}

// Keepalives every 200 ms: healthy within 600 ms of one, dead 3 s after the last.
const f = serverForFile({
  args: ['--heartbeat-interval', '200ms', '--heartbeat-threshold', '3s', '--leader-watchdog', '500ms'],
});

const startWorker = serverLauncher({ databaseUrl: () => f.db.url, args: ['--role', 'worker'], servers: workers });
const agents = agentsOfEachTest(f);

afterAll(async () => {
  for (const w of workers) await w.stop();
});

describe('leoflow status', () => {
  it('prints the cluster at a glance: this replica leading, the database and its migrations, the loop on time, the queue', async () => {
    const s = await waitFor('a full step', async () => {
      const s = await status();
      return s.last_full_step ? s : null;
    });
    expect(s).toMatchObject({
      leader: true,
      leader_id: s.replica_id,
      live: true,
      ready: true,
      failed_checks: [],
      dispatch_queue: { depth: 0, capacity: 1 },
      agents: { healthy: 0, stale: 0, dead: 0, stopped: 0 },
    });
    expect(s.database.reachable).toBe(true);
    expect(s.database.latency_ms).toBeGreaterThan(0);
    expect(s.database.migrations_version).toMatch(/^\d{3}_[a-z_]+\.sql$/);
    // One tick is 1 s: a full step began within the last couple of seconds, late by little.
    expect(Date.now() - Date.parse(s.last_full_step!.at)).toBeLessThan(5_000);
    expect(s.last_full_step!.late_ms).toBeLessThan(3_000);

    const text = await cli(f.server.url, ['status']);
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(new RegExp(`^ok: replica ${s.replica_id} \\(role auto, lite, leader\\)`));
    expect(text.stdout).toMatch(/^database {3}reachable in \d+\.\d ms, migrations at \d{3}_\w+\.sql$/m);
    expect(text.stdout).toMatch(
      /^leader {5}\S+ \(this replica\); last full step \d+\.\d s ago, (on time|\d+\.\d s late)$/m,
    );
    expect(text.stdout).toMatch(/^queue {6}0\/1 in this replica's dispatch queue$/m);
  });

  it("reports the leader's last full step from a replica that does not lead, as the leader last told it", async () => {
    const worker = await startWorker();
    const leader = await status();
    const first = await waitFor(
      "the leader's last full step, seen from the worker",
      async () => {
        const s = await status(worker);
        return s.last_full_step ? s : null;
      },
      10_000,
      100,
    );
    expect(first).toMatchObject({ leader: false, leader_id: leader.replica_id });
    expect(first.replica_id).not.toBe(leader.replica_id);
    // Told by the leader's watchdog (every 500 ms here): a step of the last second or two, on time.
    expect(Date.now() - Date.parse(first.last_full_step!.at)).toBeLessThan(3_000);
    expect(first.last_full_step!.late_ms).toBeLessThan(1_000);
    // And kept up to date: a later full step shows.
    await waitFor(
      'a later full step, seen from the worker',
      async () => Date.parse((await status(worker)).last_full_step!.at) > Date.parse(first.last_full_step!.at),
      5_000,
      100,
    );
    const text = await cli(worker.url, ['status']);
    expect(text.code, text.stderr).toBe(0);
    expect(text.stdout).toMatch(
      new RegExp(`^leader {5}${leader.replica_id}; last full step \\d+\\.\\d s ago, (on time|\\d+\\.\\d s late)$`, 'm'),
    );
  });

  it('counts an agent healthy while it keeps alive, stale once silent, dead past the heartbeat threshold', async () => {
    const agent = await agents.connect('status-agent', ['--slots', '1']);
    await waitFor('the agent healthy', async () => (await healthOf('status-agent')) === 'healthy', 20_000, 100);
    expect((await status()).agents).toEqual({ healthy: 1, stale: 0, dead: 0, stopped: 0 });
    const list = await cli(f.server.url, ['agents', 'list']);
    expect(list.stdout).toMatch(/^AGENT\s+HEALTH\s+CONNECTED/m);
    expect(list.stdout).toMatch(/^status-agent\s+healthy\s+yes/m);

    agent.child.kill('SIGKILL');
    await agent.exited;
    await waitFor('the agent stale', async () => (await healthOf('status-agent')) === 'stale', 10_000, 100);
    await waitFor('the agent dead', async () => (await healthOf('status-agent')) === 'dead', 10_000, 200);
    expect((await status()).agents).toEqual({ healthy: 0, stale: 0, dead: 1, stopped: 0 });
  });
});
