import type { Logger } from 'pino';
import { startEmbeddedPostgres } from '../db/embedded-postgres.js';
import { superviseEmbeddedPostgres, type SupervisedPostgres } from '../db/supervise-embedded-postgres.js';
import { migrate } from '../db/migrate.js';
import { createSql, type Sql } from '../db/sql.js';
import type { Config } from './config/config.js';

/** How long a stopping server waits for the embedded Postgres's fast shutdown before SIGKILL. */
const STOP_POSTGRES_MS = 5_000;

/** The database of one replica: its URL and the pools each kind of work uses. */
export interface Database {
  readonly url: string;
  /** The main pool: the scheduler, the API, the dispatch drainers, the heartbeats. */
  readonly sql: Sql;
  /** The attempt reports and what rides behind their ends. */
  readonly reportSql: Sql;
  /** The agents' claims. */
  readonly claimSql: Sql;
  /** The readiness probe's round trips, on a connection of their own so a busy pool never fails it. */
  readonly healthSql: Sql;
  /**
   * Settles when the database is gone for good: Lite's embedded Postgres died and could not be
   * kept running. Never settles for a database given by URL (its outages are waited out).
   */
  readonly lost: Promise<Error>;
  /** The replica is stopping: an embedded Postgres that dies from now on is not started again. */
  stopping(): void;
  /**
   * Ends the pools (waiting up to `timeoutS` for queries in flight) and stops an embedded Postgres;
   * after a failed start, only one this process started (`how: 'start-failed'`).
   */
  close(timeoutS: number, how?: 'stop' | 'start-failed'): Promise<void>;
}

/**
 * Opens the database a replica runs on: the configured URL, or in Lite without one an embedded
 * Postgres; then its pools, and the migrations applied, unless the replica is an observer, which
 * writes nothing (its readiness waits for another replica to apply them).
 */
export async function openDatabase(config: Config, logger: Logger): Promise<Database> {
  let embedded: SupervisedPostgres | null = null;
  let url = config.databaseUrl;
  if (!url) {
    const pgLogger = logger.child({ component: 'postgres' });
    embedded = await superviseEmbeddedPostgres(
      () => startEmbeddedPostgres({ stateDir: config.stateDir, port: config.embeddedPgPort, logger: pgLogger }),
      pgLogger,
    );
    url = embedded.url;
    logger.info({ port: config.embeddedPgPort, dataDir: embedded.dataDir }, 'embedded Postgres ready');
  }
  // Room for every dispatch drainer plus the scheduler, the API and the heartbeats, so a burst of
  // dispatches never makes the tick wait for a connection.
  const sql = createSql(url, { max: 10 + config.dispatchWorkers, applicationName: `leoflow-pool:${config.replicaId}` });
  // Statements that find their rows by id, planned once per connection instead of once per batch.
  const reportSql = createSql(url, {
    max: 4,
    applicationName: `leoflow-reports:${config.replicaId}`,
    genericPlans: true,
  });
  // The agents' claims, likewise, on a connection of their own: a report batch holds a reports
  // connection reserved until what rides behind its ends has answered, and a claim waiting for one
  // holds a freed agent slot idle (placement rounds claim one at a time, so one is enough).
  const claimSql = createSql(url, {
    max: 1,
    applicationName: `leoflow-claims:${config.replicaId}`,
    genericPlans: true,
  });
  const healthSql = createSql(url, { max: 1, applicationName: `leoflow-health:${config.replicaId}` });
  const db: Database = {
    url,
    sql,
    reportSql,
    claimSql,
    healthSql,
    lost: embedded?.lost ?? new Promise<Error>(() => {}),
    stopping: () => embedded?.stopRestarting(),
    async close(timeoutS, how = 'stop') {
      await Promise.all(
        [sql, reportSql, claimSql, healthSql].map((pool) => pool.end({ timeout: timeoutS }).catch(() => {})),
      );
      // Its fast shutdown takes a fraction of a second; one that does not end is killed.
      const stopMs = Math.min(STOP_POSTGRES_MS, timeoutS * 1000);
      if (how === 'stop') await embedded?.stop(stopMs);
      else await embedded?.release(stopMs);
    },
  };
  try {
    if (config.role !== 'observer') await migrate(sql, logger);
  } catch (err) {
    await db.close(1, 'start-failed');
    throw err;
  }
  return db;
}
