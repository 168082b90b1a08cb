import { ACTIVE_TI_STATES } from '../core/states.js';
import { inlineLiterals } from './inline-literals.js';
import type { Sql } from './sql.js';

export interface AgentRow {
  agent_id: string;
  labels: Record<string, string>;
  capabilities: string[];
  slots: number;
  draining: boolean;
  connected_replica: string | null;
  session_id: string | null;
  last_seen_at: Date | null;
  connected_at: Date | null;
  /** The agent process that said Hello last. */
  incarnation_id: string | null;
  /** When it ended its stream itself (its goodbye); null while connected or once it connects again. */
  stopped_at: Date | null;
  /** Attempts it holds now (queued or running), counted from task_instances. */
  running: number;
}

/**
 * Records an agent's Hello: it is now held by this replica's session. Draining survives reconnects.
 * Null, and nothing written, when another process of the agent (another incarnation) holds it on a
 * stream seen within `liveMs`: a duplicate agent id never takes a live agent's place.
 */
export async function connectAgent(
  sql: Sql,
  a: {
    agentId: string;
    labels: Record<string, string>;
    capabilities: string[];
    slots: number;
    replicaId: string;
    sessionId: string;
    protocolVersion: number;
    incarnationId: string;
    liveMs: number;
    oneShot?: boolean;
    /** The API token the Hello was let in with, if any. */
    tokenId?: string | null;
  },
): Promise<{ draining: boolean } | null> {
  const [row] = await sql<{ draining: boolean }[]>`
    insert into agents (agent_id, labels, capabilities, slots, connected_replica, session_id, last_seen_at,
                        connected_at, protocol_version, draining, incarnation_id, token_id)
    values (${a.agentId}, ${sql.json(a.labels)}, ${sql.json(a.capabilities)}, ${a.slots}, ${a.replicaId},
            ${a.sessionId}, now(), now(), ${a.protocolVersion}, ${a.oneShot ?? false}, ${a.incarnationId},
            ${a.tokenId ?? null})
    on conflict (agent_id) do update set labels = excluded.labels, capabilities = excluded.capabilities,
      draining = agents.draining or excluded.draining,
      slots = excluded.slots, connected_replica = excluded.connected_replica, session_id = excluded.session_id,
      last_seen_at = now(), connected_at = now(), protocol_version = excluded.protocol_version, incarnation_id =
        excluded.incarnation_id,
      stopped_at = null, token_id = excluded.token_id
    where agents.session_id is null or agents.incarnation_id is null or agents.incarnation_id = excluded.incarnation_id
      or agents.last_seen_at < now() - ${a.liveMs} * interval '1 millisecond'
    returning draining`;
  return row ? { draining: row.draining } : null;
}

/**
 * The session ended: the agent is disconnected, unless a newer session already holds it. `goodbye`:
 * the agent ended the stream itself (a clean stop), and is shown stopped from now on.
 */
export async function disconnectAgent(sql: Sql, agentId: string, sessionId: string, goodbye = false): Promise<void> {
  await sql`
    update agents set connected_replica = null, session_id = null, stopped_at = ${goodbye ? sql`now()` : sql`null`}
    where agent_id = ${agentId} and session_id = ${sessionId}`;
}

/**
 * This replica is shutting down: every agent it holds is shown disconnected from now on (its
 * stream stays open until the agent has moved), so no replica places work on them any more.
 */
export async function disconnectReplica(sql: Sql, replicaId: string): Promise<number> {
  const rows =
    await sql`update agents set connected_replica = null, session_id = null where connected_replica = ${replicaId}`;
  return rows.count;
}

/** One write for the last-seen time of every agent that kept alive since the last flush. */
export async function touchAgents(sql: Sql, sessions: { agentId: string; sessionId: string }[]): Promise<void> {
  if (sessions.length === 0) return;
  await sql`
    update agents a set last_seen_at = now()
    from unnest(${sessions.map((s) => s.agentId)}::text[], ${sessions.map((s) => s.sessionId)}::uuid[]) as
      s(agent_id, session_id)
    where a.agent_id = s.agent_id and a.session_id = s.session_id`;
}

/** An agent as the API shows it (`Agent` in cluster.proto): its stored columns the API reads,
 *  and the attempts it holds. */
export type AgentApiView = Pick<
  AgentRow,
  | 'agent_id'
  | 'labels'
  | 'capabilities'
  | 'slots'
  | 'draining'
  | 'connected_replica'
  | 'last_seen_at'
  | 'stopped_at'
  | 'running'
>;

/** The columns of an agent read for `AgentView`, and its held attempts counted. */
function agentView(sql: Sql) {
  return sql`
    a.agent_id, a.labels, a.capabilities, a.slots, a.draining, a.connected_replica, a.last_seen_at, a.stopped_at,
    (select count(*)::int from task_instances t where t.agent_id = a.agent_id and t.state in
      (${inlineLiterals(sql, ACTIVE_TI_STATES)})) as running`;
}

export async function listAgents(sql: Sql): Promise<AgentApiView[]> {
  return sql<AgentApiView[]>`select ${agentView(sql)} from agents a order by a.agent_id`;
}

export async function getAgent(sql: Sql, agentId: string): Promise<AgentApiView | null> {
  const [row] = await sql<AgentApiView[]>`select ${agentView(sql)} from agents a where a.agent_id = ${agentId}`;
  return row ?? null;
}

export async function setDraining(sql: Sql, agentId: string, draining: boolean): Promise<boolean> {
  const rows = await sql`update agents set draining = ${draining} where agent_id = ${agentId}`;
  return rows.count === 1;
}

/**
 * Connected agents seen within `freshMs` (a deaf stream stops being seen), with their current
 * load: those not draining can take work; those draining are read to say why work waits
 * (AGENT_DRAINING). The placement itself is decided in memory.
 */
export async function availableAgents(sql: Sql, freshMs: number): Promise<(AgentRow & { holding: string[] })[]> {
  return sql<(AgentRow & { holding: string[] })[]>`
    select a.*, h.running, h.holding
    from agents a,
      lateral (select count(*)::int as running, coalesce(array_agg(t.attempt_token::text), '{}') as holding
               from task_instances t where t.agent_id = a.agent_id and t.state in
                 (${inlineLiterals(sql, ACTIVE_TI_STATES)})) h
    where a.connected_replica is not null
      and a.last_seen_at > now() - ${freshMs} * interval '1 millisecond'`;
}

/** Attempts of one task currently held per agent (for max_parallel_per_agent). */
export async function taskLoadByAgent(sql: Sql, runId: string, taskId: string): Promise<Map<string, number>> {
  // max_parallel_per_agent is per task across runs of the DAG: count by dag and task id.
  const rows = await sql<{ agent_id: string; n: number }[]>`
    select t.agent_id, count(*)::int as n from task_instances t
    join dag_runs r on r.id = t.run_id
    where t.state in (${inlineLiterals(sql, ACTIVE_TI_STATES)}) and t.agent_id is not null and t.task_id = ${taskId}
      and r.dag_id = (select dag_id from dag_runs where id = ${runId})
    group by t.agent_id`;
  return new Map(rows.map((r) => [r.agent_id, r.n]));
}

/**
 * How many agent rows this API token holds, when `agentId` would be one more (it has no row, or
 * another token's); null when it would not. A Hello's agent id is its caller's choice: without a
 * bound, one agent token could fill the table with rows.
 */
export async function agentsOfTokenPast(
  sql: Sql,
  tokenId: string,
  agentId: string,
  max: number,
): Promise<number | null> {
  const [row] = await sql<{ mine: boolean; n: number }[]>`
    select exists (select 1 from agents where agent_id = ${agentId} and token_id = ${tokenId}) as mine,
           (select count(*) from agents where token_id = ${tokenId})::int as n`;
  return !row || row.mine || row.n < max ? null : row.n;
}
