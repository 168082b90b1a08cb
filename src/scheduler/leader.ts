import pg from 'pg';
import type { Logger } from 'pino';
import { leaderSessionName } from '../db/leader.js';
import { setConnectionCheckInterval, setIdleSessionTimeout } from '../db/leader-lock/bound-lock-session.js';
import { checkLeaderLock } from '../db/leader-lock/check-leader-lock.js';
import { takeLeaderLock } from '../db/leader-lock/take-leader-lock.js';

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
export class AdvisoryLockElector implements LeaderElector {
  readonly #opts: LeaderElectorOptions;
  #client: pg.Client | null = null;
  #leader = false;
  #since: Date | null = null;
  #stopped = false;
  #watchdog: NodeJS.Timeout | null = null;
  #retryTimer: NodeJS.Timeout | null = null;

  constructor(opts: LeaderElectorOptions) {
    this.#opts = opts;
  }

  get isLeader(): boolean {
    return this.#leader;
  }

  get leadingSince(): Date | null {
    return this.#since;
  }

  start(): void {
    this.#stopped = false;
    void this.#campaign();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#retryTimer) clearTimeout(this.#retryTimer);
    if (this.#watchdog) clearInterval(this.#watchdog);
    const c = this.#client;
    this.#client = null;
    const was = this.#leader;
    this.#leader = false;
    this.#since = null;
    // Stop stepping before the lock is released, so there is never a moment when this replica
    // still steps while another one already leads.
    if (was) this.#opts.onDeposed('stopping');
    if (c) {
      c.removeAllListeners();
      c.on('error', () => {});
      await c.end().catch(() => {});
    }
  }

  /** The lock session is gone or in doubt: stop leading at once and campaign again. */
  #depose(reason: string): void {
    if (this.#watchdog) clearInterval(this.#watchdog);
    this.#watchdog = null;
    const c = this.#client;
    this.#client = null;
    c?.removeAllListeners();
    c?.on('error', () => {});
    void c?.end().catch(() => {});
    if (this.#leader) {
      this.#leader = false;
      this.#since = null;
      this.#opts.logger.warn({ reason }, 'lost leadership');
      this.#opts.onDeposed(reason);
    }
    if (!this.#stopped) {
      this.#retryTimer = setTimeout(() => void this.#campaign(), this.#opts.retryMs);
    }
  }

  async #campaign(): Promise<void> {
    const opts = this.#opts;
    const { logger } = opts;
    this.#retryTimer = null;
    if (this.#stopped) return;
    // A bounded connect (a server still starting can leave it hanging) and TCP keepalives (a
    // server that vanished without closing the socket is noticed by the kernel, not never).
    const c = new pg.Client({
      connectionString: opts.databaseUrl,
      application_name: leaderSessionName(opts.replicaId, null),
      connectionTimeoutMillis: 10_000,
      keepAlive: true,
    });
    this.#client = c;
    c.on('error', (err) => {
      if (this.#client === c) this.#depose(`lock session error: ${err.message}`);
    });
    c.on('end', () => {
      if (this.#client === c) this.#depose('lock session ended');
    });
    try {
      await c.connect();
      await this.#configureSession(c);
      await takeLeaderLock(c, LEADER_LOCK_KEY);
    } catch (err) {
      if (this.#client === c && !this.#stopped) {
        logger.warn({ err: (err as Error).message }, 'campaign failed; retrying');
        this.#depose('campaign failed');
      }
      return;
    }
    if (this.#client !== c || this.#stopped) return;
    this.#leader = true;
    this.#since = new Date();
    logger.info({ replicaId: opts.replicaId }, 'elected leader');
    this.#watchdog = setInterval(() => void this.#check(c), opts.watchdogMs);
    opts.onElected();
  }

  /**
   * A leader that freezes (SIGSTOP, a stalled event loop, a paused VM) keeps its TCP connection, so
   * Postgres would hold the lock for it forever. With an idle-session timeout of a few watchdog
   * periods the server ends the session of a leader that stopped checking, and the standby takes
   * over. (Postgres 14+; older servers only lose this protection.)
   */
  async #configureSession(c: pg.Client): Promise<void> {
    const { logger, watchdogMs } = this.#opts;
    const idleMs = Math.max(3 * watchdogMs, 1000);
    await setIdleSessionTimeout(c, idleMs).catch((err: Error) =>
      logger.warn({ err: err.message }, 'idle_session_timeout not supported: a frozen leader would keep the lock'),
    );
    // A campaign blocks in the lock wait, where a backend does not read its socket: a standby
    // that exits would leave its backend waiting, to take the lock the moment the leader lets
    // go and hold it until it notices. With this check the server notices the closed socket
    // within a second or so and drops the wait. (Postgres 14+, and only where the kernel tells.)
    await setConnectionCheckInterval(c, Math.max(watchdogMs, 1000)).catch((err: Error) =>
      logger.warn(
        { err: err.message },
        'client_connection_check_interval not supported: a stopped standby may hold the lock for a moment',
      ),
    );
  }

  /**
   * The watchdog: the session is alive and still holds the lock. It also renames the session with
   * the loop's report: the other replicas read it where they find the leader (GetHealth), at no
   * cost of its own.
   */
  async #check(c: pg.Client): Promise<void> {
    const opts = this.#opts;
    try {
      const name = leaderSessionName(opts.replicaId, opts.stepReport?.() ?? null);
      const holds = await checkLeaderLock(c, LEADER_LOCK_KEY, name);
      if (!holds && this.#client === c) this.#depose('advisory lock no longer held');
    } catch (err) {
      if (this.#client === c) this.#depose(`watchdog query failed: ${(err as Error).message}`);
    }
  }
}

export function createLeaderElector(opts: LeaderElectorOptions): LeaderElector {
  return new AdvisoryLockElector(opts);
}
