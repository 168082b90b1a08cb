import type { Logger } from 'pino';
import type { Config } from './config/config.js';
import { openDatabase, type Database } from './database.js';
import { lockStateDir, type StateDirLock } from './state-dir-lock.js';

/** What a replica keeps its state in: the state directory, held, and the database, open. */
export interface Storage {
  lock: StateDirLock;
  db: Database;
}

/**
 * Takes the state directory and opens the database (an embedded Postgres started, migrations
 * applied). Its modules are few, so the CLI starts it while the rest of the server's load: a warm
 * start then waits for the slower of the two, not for both in turn.
 */
export async function openStorage(config: Config, logger: Logger): Promise<Storage> {
  // One server per state directory, taken before anything in it is touched: a second server
  // refuses here, naming the first, and never reaches the first's embedded Postgres.
  const lock = lockStateDir(config.stateDir);
  try {
    return { lock, db: await openDatabase(config, logger) };
  } catch (err) {
    lock.release();
    throw err;
  }
}
