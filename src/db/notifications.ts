import pg from 'pg';
import type { Logger } from 'pino';
import type { Sql } from './sql.js';

/** The channels replicas tell each other things on. */
export const CHANNELS = {
  /** Something happened that the leader should step for (payload unused). */
  nudge: 'leoflow_nudge',
  /** `<agentId> <tiId>`: deliver this attempt to this agent, if you hold its stream. */
  assign: 'leoflow_assign',
  /** `<tiId> <reason>`: stop this attempt, if one of your executors (a subprocess, an agent's
   *  stream) holds it. */
  cancel: 'leoflow_cancel',
  /** `<agentId>`: send Drain to this agent, if you hold its stream. */
  drain: 'leoflow_drain',
  /** New rows in `events` may be visible: the runs they concern, comma-separated, or '' for any
   *  (sent by a trigger on `events`, migrations 011 and 031). */
  events: 'leoflow_events',
  /** New lines in `task_logs`: their runs, as for `events` (a trigger on `task_logs`, migrations 011, 031). */
  logs: 'leoflow_logs',
  /** `<tokenId>`: this API token was revoked: end the streams it let in (token-streams.ts). */
  tokenRevoked: 'leoflow_token_revoked',
} as const;

export type Channel = (typeof CHANNELS)[keyof typeof CHANNELS];

export async function notify(sql: Sql, channel: Channel, payload = ''): Promise<void> {
  await sql.notify(channel, payload);
}

export interface Listener {
  close(): Promise<void>;
}

/**
 * LISTENs on every channel on a dedicated connection (a pooled one could be handed to someone
 * else mid-listen), reconnecting after errors. Notifications sent while it was reconnecting are
 * lost, which is fine: each one only speeds up what the tick and the heartbeats do anyway.
 */
export function listen(
  databaseUrl: string,
  logger: Logger,
  onNotify: (channel: Channel, payload: string) => void,
  applicationName = 'leoflow-listen',
): Listener {
  let client: pg.Client | null = null;
  let closed = false;
  let timer: NodeJS.Timeout | null = null;

  const connect = async () => {
    timer = null;
    if (closed) return;
    const c = new pg.Client({
      connectionString: databaseUrl,
      application_name: applicationName,
      connectionTimeoutMillis: 10_000,
      keepAlive: true,
    });
    client = c;
    const retry = (why: string) => {
      if (client !== c || closed) return;
      client = null;
      c.removeAllListeners();
      c.on('error', () => {});
      void c.end().catch(() => {});
      logger.warn({ why }, 'notification listener lost; reconnecting');
      timer = setTimeout(() => void connect(), 1000);
    };
    c.on('error', (err) => retry(err.message));
    c.on('end', () => retry('connection ended'));
    c.on('notification', (n) => onNotify(n.channel as Channel, n.payload ?? ''));
    try {
      await c.connect();
      for (const ch of Object.values(CHANNELS)) await c.query(`listen ${ch}`);
    } catch (err) {
      retry((err as Error).message);
    }
  };
  void connect();
  return {
    async close() {
      closed = true;
      if (timer) clearTimeout(timer);
      const c = client;
      client = null;
      if (c) {
        c.removeAllListeners();
        c.on('error', () => {});
        await c.end().catch(() => {});
      }
    },
  };
}
