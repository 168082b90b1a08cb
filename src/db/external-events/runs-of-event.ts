import type { RunRow } from '../runs.js';
import type { Sql, TxSql } from '../sql.js';

/** The runs an event started (their key is the event's, see take-event.ts), by DAG. */
export async function runsOfEvent(tx: Sql | TxSql, runKey: string): Promise<RunRow[]> {
  return tx<RunRow[]>`select * from dag_runs where run_key = ${runKey} and run_type = 'event' order by dag_id`;
}
