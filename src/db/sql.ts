import postgres from 'postgres';

/**
 * The main pool: postgres.js, for pipelining and tagged-template SQL on the hot paths. The driver is
 * vendored with a patch (vendor/README.md): as released, a connection lost at the wrong moment (a
 * Postgres restart) threw from its timers and ended the process, or left a pool unable to serve.
 */
export type Sql = postgres.Sql<Record<string, never>>;
export type TxSql = postgres.TransactionSql<Record<string, never>>;
/** A query not yet sent: postgres.js sends it when it is awaited or `execute()`d. */
export type PendingQuery<T extends readonly postgres.MaybeRow[]> = postgres.PendingQuery<T>;
/** A piece of a statement, put into another with `${fragment}`. */
export type Fragment = postgres.Fragment;

export interface SqlOptions {
  max?: number;
  /** Shown in pg_stat_activity, so an operator can tell replicas apart. */
  applicationName?: string;
  /**
   * Plan each statement once per connection and keep the plan (`plan_cache_mode =
   * force_generic_plan`), instead of a custom plan for every execution. Only for a pool whose
   * statements find their rows by key from arrays of ids (the attempt reports, the claims): for
   * them the plan does not depend on the values, and planning anew was 40 % of their time. A
   * statement that scans by a state or reads hundreds of runs needs custom plans: it belongs on
   * the main pool.
   */
  genericPlans?: boolean;
}

/**
 * A kept plan is made from the statistics of the moment it is made, and a new database has none:
 * a table of a few pages is cheaper to scan than to look up, and that plan would be kept while the
 * table grows (until autovacuum first analyzes it). The statements of such a pool find their rows
 * by key, so they are told never to scan a table whole where an index will do, nor to build
 * bitmaps: with no statistics, PostgreSQL 15 read the whole index of running runs (a partial
 * index the state test matches) into a bitmap to AND it with the keys' lookup. Before
 * PostgreSQL 18 a scan that must happen anyway (postgres.js's read of the catalog's array types on
 * every new connection) is then costed at 10^10, which turns on JIT compilation: 150–270 ms for
 * a query of 0.3 ms. These statements never gain from JIT, so it is off.
 */
const GENERIC_PLANS = {
  plan_cache_mode: 'force_generic_plan',
  enable_seqscan: 'off',
  enable_bitmapscan: 'off',
  jit: 'off',
};

/**
 * Seconds before the n-th connection attempt in a row after failures. postgres.js waits up to
 * min(3^n / 100, 20) s, so a Postgres down for a few seconds (a restart) left a pool idle for up
 * to 20 s after it was back; the scheduler should notice within half a second.
 */
const reconnectDelayS = (attempt: number) => Math.min(0.05 * 2 ** attempt, 0.5);

export function createSql(url: string, opts: SqlOptions = {}): Sql {
  return postgres(url, {
    max: opts.max ?? 10,
    onnotice: () => {},
    // Ids are bigint: keep them as decimal strings end to end (the protos use jstype = JS_STRING).
    types: {},
    connection: { application_name: opts.applicationName ?? 'leoflow', ...(opts.genericPlans ? GENERIC_PLANS : {}) },
    idle_timeout: 60,
    connect_timeout: 10,
    backoff: reconnectDelayS,
  }) as Sql;
}
