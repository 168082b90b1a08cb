/** One check of a probe: its name, whether it passed, and what was seen (why it failed). */
export interface ProbeCheck {
  name: string;
  ok: boolean;
  detail: string;
}

export interface HealthReport {
  ok: boolean;
  checks: ProbeCheck[];
  /** Readiness's measurements: the database's answer time (ms) and its newest migration, when it answered. */
  figures?: { databaseLatencyMs?: number; migrationsVersion?: string | null };
}

/** What `/healthz` and `/readyz` (and `GetHealth`) answer from. */
export interface Health {
  /** The process's loops are alive: a failing answer asks the orchestrator for a restart. */
  live(): Promise<HealthReport>;
  /** The replica can serve: a failing answer takes it out of the load balancer, nothing more. */
  ready(): Promise<HealthReport>;
}

export interface HealthOptions {
  /** The scheduler loop's progress (SchedulerLoop.progress). */
  loopProgress(): { at: number; stepSince: number | null };
  /** No progress for this long is a stalled loop. */
  loopStallMs: number;
  /** A round trip to the database (`select 1`). */
  pingDatabase(): Promise<void>;
  /** The migrations this build knows that the database has not applied. */
  pendingMigrations(): Promise<string[]>;
  /** The newest migration the database has applied. */
  latestMigration?(): Promise<string | null>;
  apiListening(): boolean;
  /** True once a graceful stop has begun: the replica takes no new requests. */
  stopping(): boolean;
  /** How long the database may take to answer before it counts as unreachable. */
  databaseTimeoutMs: number;
  now?: () => number;
}

function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} did not answer within ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

const secs = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

/**
 * Liveness and readiness, defined so that each failure has one remedy.
 *
 * Live: the scheduler loop made progress (began a turn, or ended a step) within the stall
 * threshold. The loop turns every tick on every replica, leading or not, and a leader's step ends;
 * a step stuck for longer (a query that never returns) or a loop that stopped turning is what a
 * restart cures. The event loop itself is checked by answering at all: a blocked one makes the
 * probe time out. The database is not part of liveness: restarting a replica does not bring a
 * database back, and every replica would be restarted at once.
 *
 * Ready: the API listens, the database answers within a bound, every migration this build knows
 * is applied, and the replica is not stopping.
 */
export function createHealth(o: HealthOptions): Health {
  const now = o.now ?? Date.now;
  return {
    async live() {
      const p = o.loopProgress();
      const t = now();
      let loop: ProbeCheck;
      if (p.stepSince !== null && t - p.stepSince > o.loopStallMs) {
        loop = {
          name: 'scheduler_loop',
          ok: false,
          detail: `a step has been running for ${secs(t - p.stepSince)} (stall threshold ${secs(o.loopStallMs)})`,
        };
      } else if (p.stepSince === null && t - p.at > o.loopStallMs) {
        loop = {
          name: 'scheduler_loop',
          ok: false,
          detail: `no turn of the loop for ${secs(t - p.at)} (stall threshold ${secs(o.loopStallMs)})`,
        };
      } else {
        loop = {
          name: 'scheduler_loop',
          ok: true,
          detail: p.stepSince !== null ? `stepping for ${secs(t - p.stepSince)}` : `last turn ${secs(t - p.at)} ago`,
        };
      }
      return { ok: loop.ok, checks: [loop] };
    },
    async ready() {
      const checks: ProbeCheck[] = [];
      const figures: NonNullable<HealthReport['figures']> = {};
      checks.push(
        o.stopping()
          ? { name: 'serving', ok: false, detail: 'stopping' }
          : { name: 'serving', ok: true, detail: 'not stopping' },
      );
      checks.push(
        o.apiListening()
          ? { name: 'api', ok: true, detail: 'listening' }
          : { name: 'api', ok: false, detail: 'not listening' },
      );
      let reachable = false;
      try {
        const t0 = performance.now();
        await within(o.pingDatabase(), o.databaseTimeoutMs, 'the database');
        figures.databaseLatencyMs = performance.now() - t0;
        reachable = true;
        checks.push({ name: 'database', ok: true, detail: `reachable (${figures.databaseLatencyMs.toFixed(1)} ms)` });
      } catch (err) {
        checks.push({ name: 'database', ok: false, detail: `unreachable: ${(err as Error).message}` });
      }
      if (!reachable) checks.push({ name: 'migrations', ok: false, detail: 'unknown: the database is unreachable' });
      else {
        try {
          const [pending, latest] = await within(
            Promise.all([o.pendingMigrations(), o.latestMigration?.() ?? Promise.resolve(null)]),
            o.databaseTimeoutMs,
            'the database',
          );
          figures.migrationsVersion = latest;
          const newest = latest ? ` (newest ${latest})` : '';
          checks.push(
            pending.length === 0
              ? { name: 'migrations', ok: true, detail: `all applied${newest}` }
              : { name: 'migrations', ok: false, detail: `${pending.length} pending: ${pending.join(', ')}${newest}` },
          );
        } catch (err) {
          checks.push({ name: 'migrations', ok: false, detail: `unknown: ${(err as Error).message}` });
        }
      }
      return { ok: checks.every((c) => c.ok), checks, figures };
    },
  };
}

/** A report as the probes' plain-text body: a first line saying ok or what failed, then each check. */
export function healthText(what: 'live' | 'ready', r: HealthReport): string {
  const failed = r.checks.filter((c) => !c.ok);
  const head = r.ok ? 'ok' : `not ${what}: ${failed.map((c) => `${c.name}: ${c.detail}`).join('; ')}`;
  return `${head}\n${r.checks.map((c) => `${c.ok ? 'ok  ' : 'FAIL'} ${c.name}: ${c.detail}`).join('\n')}\n`;
}
