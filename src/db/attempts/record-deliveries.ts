import { ACTIVE_TI_STATES } from '../../core/states.js';
import type { Sql } from '../sql.js';

/** One Assign about to go down a stream: the attempt, and the agent process it goes to. */
export interface AttemptDelivery {
  tiId: string;
  attemptToken: string;
  agentId: string;
  incarnationId: string;
}

const key = (tiId: string, token: string, incarnationId: string) => `${tiId}/${token}/${incarnationId}`;

/**
 * Records, before each Assign is sent, which agent process it is sent to, in one statement for
 * many: each only if the attempt is still current for that agent and was sent to no other process
 * (`delivered_to` null or this one). Resolves the deliveries recorded; one missing must not be
 * sent. The row lock makes it a compare-and-set, so two processes can never both be given one
 * attempt, whichever replicas hold their streams.
 */
export async function recordDeliveries(sql: Sql, ds: AttemptDelivery[]): Promise<Set<string>> {
  if (ds.length === 0) return new Set();
  const rows = await sql<{ id: string; token: string; incarnation: string }[]>`
    update task_instances t set delivered_to = d.incarnation
    from unnest(${ds.map((d) => d.tiId)}::bigint[], ${ds.map((d) => d.attemptToken)}::uuid[],
                ${ds.map((d) => d.agentId)}::text[], ${ds.map((d) => d.incarnationId)}::uuid[]) as d(id, token,
                  agent_id, incarnation)
    where t.id = d.id and t.attempt_token = d.token and t.agent_id = d.agent_id
      and t.state = any(${ACTIVE_TI_STATES as string[]}::text[])
      and (t.delivered_to is null or t.delivered_to = d.incarnation)
    returning t.id, t.attempt_token as token, t.delivered_to as incarnation`;
  return new Set(rows.map((r) => key(r.id, r.token, r.incarnation)));
}

/**
 * The deliveries asked for in one turn of the event loop (a placement round, the undelivered work
 * of a reconnect), recorded together by `recordDeliveries`. Resolves whether this one may be sent.
 */
export function createDeliveryRecorder(sql: Sql): (d: AttemptDelivery) => Promise<boolean> {
  let pending: { d: AttemptDelivery; resolve(ok: boolean): void; reject(err: unknown): void }[] = [];
  const flush = async () => {
    const batch = pending;
    pending = [];
    try {
      const done = await recordDeliveries(
        sql,
        batch.map((p) => p.d),
      );
      for (const p of batch) p.resolve(done.has(key(p.d.tiId, p.d.attemptToken, p.d.incarnationId)));
    } catch (err) {
      for (const p of batch) p.reject(err);
    }
  };
  return (d) =>
    new Promise<boolean>((resolve, reject) => {
      if (pending.length === 0) setImmediate(() => void flush());
      pending.push({ d, resolve, reject });
    });
}
