import { randomUUID } from 'node:crypto';
/**
 * A replica's agent fleet during a graceful stop, in process against real Postgres: Welcome
 * carries the reconnect bound; `leave()` shows the agents disconnected (no replica places on
 * them) and refuses new streams; `sendAway()` tells each agent to reconnect elsewhere and waits
 * for it to go; an Assign notified for an agent told to go is given back, not left queued.
 */
import { create } from '@bufbuild/protobuf';
import { Code, ConnectError } from '@connectrpc/connect';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { createReportBatcher } from '../../src/db/attempts/report-batcher.js';
import { CHANNELS } from '../../src/db/notifications.js';
import {
  ConnectRequestSchema,
  ConnectResponseSchema,
  ProtocolVersion,
  type ConnectRequest,
  type ConnectResponse,
} from '../../src/gen/leoflow/v1/agent_pb.js';
import { AgentConnection } from '../../src/server/agents/connection.js';
import { createAgentFleet } from '../../src/server/agents/fleet.js';
import { AsyncQueue } from '../../src/server/agents/async-queue.js';
import { createMetrics } from '../../src/server/observability/metrics.js';
import { quietLogWriter } from '../helpers/quiet-log-writer.js';
import { dag, task } from '../helpers/spec-builders.js';
import { databaseForFile } from '../helpers/test-database.js';
import { attemptFixtures } from '../helpers/attempt-fixtures.js';

const db = databaseForFile();

const fixtures = attemptFixtures(() => db.sql, 'agents');
/** A TI of a running run, claimed for agent `agentId` (queued, try 1). */
const claimedFor = async (agentId: string): Promise<string> =>
  (await fixtures.claimedFor(agentId, dag('leave', [task('t', { executor: 'agents' })]))).tiId;

/** One agent stream, driven by hand: what it sends, and everything it is answered. */
function openStream(connection: AgentConnection, agentId: string) {
  const requests = new AsyncQueue<ConnectRequest>();
  const received: ConnectResponse[] = [];
  requests.push(
    create(ConnectRequestSchema, {
      msg: {
        case: 'hello',
        value: { protocolVersion: ProtocolVersion.PROTOCOL_VERSION_2, agentId, slots: 2, incarnationId: randomUUID() },
      },
    }),
  );
  const ended = (async (): Promise<void> => {
    // The handler yields init shapes: made whole, they read as messages.
    for await (const r of connection.run(requests, new AbortController().signal))
      received.push(create(ConnectResponseSchema, r));
  })();
  return { requests, received, ended, kinds: () => received.map((r) => r.msg.case) };
}

async function until<T>(
  what: string,
  fn: () => T | undefined | false | Promise<T | undefined | false>,
  ms = 20_000,
): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('an agent fleet leaving (graceful stop)', () => {
  it('bounds reconnects in Welcome, stops placement on its agents, refuses new streams, sends agents away, and gives back an Assign it can no longer push', async () => {
    const logs = quietLogWriter(db.sql);
    const reports = createReportBatcher(db.sql, { retryMs: 1000, logs });
    const fleet = createAgentFleet({
      sql: db.sql,
      install: 'test-install',
      logs,
      reports,
      logger: pino({ level: 'silent' }),
      metrics: createMetrics(),
      replicaId: 'r1',
      keepaliveMs: 60_000,
      killGraceMs: 10_000,
      heartbeatThresholdMs: 4000,
      agentCredentials: {
        required: false,
        sharedToken: null,
        podOfAttempt: async () => null,
        authenticator: { authenticate: async () => ({ ok: false, reason: 'unknown API token' }), forget: () => {} },
      },
      nudge: () => {},
      nudgeQueued: () => {},
    });
    try {
      const s = openStream(new AgentConnection(fleet.sessionDeps), 'x1');
      await until('Welcome', () => s.received[0]);
      const welcome = s.received[0]!.msg;
      expect(welcome.case).toBe('welcome');
      if (welcome.case === 'welcome')
        expect(
          Number(welcome.value.maxReconnectBackoff!.seconds) * 1000 + welcome.value.maxReconnectBackoff!.nanos / 1e6,
        ).toBe(1000);
      await until('registered', () => fleet.registry.get('x1'));

      // Before the stop, an Assign notified for the agent goes down its stream.
      const before = await claimedFor('x1');
      await fleet.onNotification(CHANNELS.assign, `x1 ${before}`);
      await until('Assign', () => s.kinds().includes('assign'));
      // It carries the fleet's kill grace, which the agent stops it with.
      const assign = s.received.find((r) => r.msg.case === 'assign')!.msg;
      if (assign.case === 'assign') expect(assign.value.killGrace).toMatchObject({ seconds: 10n, nanos: 0 });

      // 1. No replica places on it any more; a new stream is refused.
      await fleet.leave();
      const [row] = await db.sql<
        { connected_replica: string | null; session_id: string | null }[]
      >`select connected_replica, session_id from agents where agent_id = 'x1'`;
      expect(row).toEqual({ connected_replica: null, session_id: null });
      const late = openStream(new AgentConnection(fleet.sessionDeps), 'x2');
      await expect(late.ended).rejects.toThrow(
        new ConnectError('replica r1 is shutting down: connect to another', Code.Unavailable),
      );
      const [x2] = await db.sql<
        { connected_replica: string | null }[]
      >`select connected_replica from agents where agent_id = 'x2'`;
      expect(x2!.connected_replica).toBeNull();

      // 3. The agent is told to reconnect elsewhere; an Assign for it after that is given back.
      const away = fleet.sendAway(3000);
      await until('Reconnect', () => s.kinds().includes('reconnect'));
      const after = await claimedFor('x1');
      await fleet.onNotification(CHANNELS.assign, `x1 ${after}`);
      await new Promise((r) => setTimeout(r, 50));
      expect(s.kinds().filter((k) => k === 'assign')).toHaveLength(1);
      const [given] = await db.sql<
        { state: string; try_number: number; pending_reason: string | null }[]
      >`select state, try_number, pending_reason from task_instances where id = ${after}`;
      expect(given).toEqual({ state: 'scheduled', try_number: 0, pending_reason: 'AGENT_GONE:x1' });
      // The attempt delivered before is still the agent's.
      const [kept] = await db.sql<
        { state: string; agent_id: string }[]
      >`select state, agent_id from task_instances where id = ${before}`;
      expect(kept).toEqual({ state: 'queued', agent_id: 'x1' });

      // The agent ends its stream: sendAway is done, with nobody left.
      s.requests.close();
      await s.ended;
      expect(await away).toBe(0);
      expect(fleet.registry.size).toBe(0);
    } finally {
      await fleet.close();
      await reports.drain();
      await logs.close();
    }
  });
});
