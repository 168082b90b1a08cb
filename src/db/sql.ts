import postgres from 'postgres';

/** The main pool: postgres.js, for pipelining and tagged-template SQL on the hot paths. */
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
}

export function createSql(url: string, opts: SqlOptions = {}): Sql {
  return postgres(url, {
    max: opts.max ?? 10,
    onnotice: () => {},
    // Ids are bigint: keep them as decimal strings end to end (the protos use jstype = JS_STRING).
    types: {},
    connection: { application_name: opts.applicationName ?? 'leoflow' },
    idle_timeout: 60,
    connect_timeout: 10,
  }) as Sql;
}
