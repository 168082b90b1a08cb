import pg from 'pg';
import type { Logger } from 'pino';
import { leaderSessionName } from '../db/leader.js';

/** The advisory-lock key every replica campaigns for ("leoflow" in ASCII, truncated). */
export const LEADER_LOCK_KEY = 0x6c656f66;

export interface LeaderElectorOptions {
  databaseUrl: string;
  replicaId: string;
  logger: Logger;
  /** How often the leader checks that its lock session is alive and still holds the lock. */
  watchdogMs: number;
  /** Delay before campaigning again after the lock session failed. */
  retryMs: number;
  onElected(): void;
  onDeposed(reason: string): void;
  /**
   * What the leader says of its loop to the other replicas (its last full step and how late it
   * is), written into its lock session's name at each watchdog check; null: nothing yet.
   */
  stepReport?(): { lastFullStepAt: number; lateMs: number } | null;
}

export interface LeaderElector {
  readonly isLeader: boolean;
  readonly leadingSince: Date | null;
  start(): void;
  stop(): Promise<void>;
}

/**
 * Leader election with a session-level `pg_advisory_lock` held on a dedicated connection (not
 * from the pool: a pooled connection could be recycled and silently drop the lock). Campaigning
 * blocks in Postgres, so a standby takes over the instant the leader's session ends. The
 * client's `error`/`end` events and a watchdog (`SELECT 1` plus `pg_locks` ownership) make a lost
 * lock visible; on loss the replica stops stepping at once and campaigns again.
 */
export function createLeaderElector(opts: LeaderElectorOptions): LeaderElector {
  const { logger } = opts;
  let client: pg.Client | null = null;
  let leader = false;
  let since: Date | null = null;
  let stopped = false;
  let watchdog: NodeJS.Timeout | null = null;
  let retryTimer: NodeJS.Timeout | null = null;

  const depose = (reason: string) => {
    if (watchdog) clearInterval(watchdog);
    watchdog = null;
    const c = client;
    client = null;
    c?.removeAllListeners();
    c?.on('error', () => {});
    void c?.end().catch(() => {});
    if (leader) {
      leader = false;
      since = null;
      logger.warn({ reason }, 'lost leadership');
      opts.onDeposed(reason);
    }
    if (!stopped) {
      retryTimer = setTimeout(() => void campaign(), opts.retryMs);
    }
  };

  const campaign = async () => {
    retryTimer = null;
    if (stopped) return;
    // A bounded connect (a server still starting can leave it hanging) and TCP keepalives (a
    // server that vanished without closing the socket is noticed by the kernel, not never).
    const c = new pg.Client({
      connectionString: opts.databaseUrl,
      application_name: leaderSessionName(opts.replicaId, null),
      connectionTimeoutMillis: 10_000,
      keepAlive: true,
    });
    client = c;
    c.on('error', (err) => {
      if (client === c) depose(`lock session error: ${err.message}`);
    });
    c.on('end', () => {
      if (client === c) depose('lock session ended');
    });
    try {
      await c.connect();
      // A leader that freezes (SIGSTOP, a stalled event loop, a paused VM) keeps its TCP
      // connection, so Postgres would hold the lock for it forever. With an idle-session timeout
      // of a few watchdog periods the server ends the session of a leader that stopped checking,
      // and the standby takes over. (Postgres 14+; older servers only lose this protection.)
      const idleMs = Math.max(3 * opts.watchdogMs, 1000);
      await c
        .query(`set idle_session_timeout = ${idleMs}`)
        .catch((err: Error) =>
          logger.warn({ err: err.message }, 'idle_session_timeout not supported: a frozen leader would keep the lock'),
        );
      // A campaign blocks in the lock wait, where a backend does not read its socket: a standby
      // that exits would leave its backend waiting, to take the lock the moment the leader lets
      // go and hold it until it notices. With this check the server notices the closed socket
      // within a second or so and drops the wait. (Postgres 14+, and only where the kernel tells.)
      await c
        .query(`set client_connection_check_interval = ${Math.max(opts.watchdogMs, 1000)}`)
        .catch((err: Error) =>
          logger.warn(
            { err: err.message },
            'client_connection_check_interval not supported: a stopped standby may hold the lock for a moment',
          ),
        );
      await c.query('select pg_advisory_lock($1)', [LEADER_LOCK_KEY]);
    } catch (err) {
      if (client === c && !stopped) {
        logger.warn({ err: (err as Error).message }, 'campaign failed; retrying');
        depose('campaign failed');
      }
      return;
    }
    if (client !== c || stopped) return;
    leader = true;
    since = new Date();
    logger.info({ replicaId: opts.replicaId }, 'elected leader');
    watchdog = setInterval(() => void check(c), opts.watchdogMs);
    opts.onElected();
  };

  const check = async (c: pg.Client) => {
    try {
      // The check also renames the session with the loop's report: the other replicas read it
      // where they find the leader (GetHealth), at no cost of its own.
      const { rows } = await c.query(
        `select set_config('application_name', $2, false) as name, (select count(*)::int from pg_locks
         where locktype = 'advisory' and objid = $1 and granted and pid = pg_backend_pid()) as n`,
        [LEADER_LOCK_KEY, leaderSessionName(opts.replicaId, opts.stepReport?.() ?? null)],
      );
      if (rows[0].n !== 1 && client === c) depose('advisory lock no longer held');
    } catch (err) {
      if (client === c) depose(`watchdog query failed: ${(err as Error).message}`);
    }
  };

  return {
    get isLeader() {
      return leader;
    },
    get leadingSince() {
      return since;
    },
    start() {
      stopped = false;
      void campaign();
    },
    async stop() {
      stopped = true;
      if (retryTimer) clearTimeout(retryTimer);
      if (watchdog) clearInterval(watchdog);
      const c = client;
      client = null;
      const was = leader;
      leader = false;
      since = null;
      // Stop stepping before the lock is released, so there is never a moment when this replica
      // still steps while another one already leads.
      if (was) opts.onDeposed('stopping');
      if (c) {
        c.removeAllListeners();
        c.on('error', () => {});
        await c.end().catch(() => {});
      }
    },
  };
}
