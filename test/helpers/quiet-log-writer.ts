import pino from 'pino';
import { createLogWriter, type LogWriter } from '../../src/db/log-writer.js';
import type { Sql } from '../../src/db/sql.js';

/** A log writer that flushes only when asked (no timer within a test) and logs nothing itself. */
export function quietLogWriter(sql: Sql): LogWriter {
  return createLogWriter(sql, pino({ level: 'silent' }), { flushMs: 60_000, maxBatch: 1000 });
}
