import type { Sql } from '../../src/db/sql.js';
import { daysAgo, pastRun, type PastRun } from './history-fixtures.js';

/** A past run that was created and ended at one moment: `days` days before `now`. */
export interface EndedRun extends Omit<PastRun, 'createdAt' | 'endedAt' | 'state'> {
  /** `success` unless given. */
  state?: PastRun['state'];
  days: number;
}

/** Writes `r` with `pastRun`, its creation and its end both `r.days` days before `now`. */
export async function endedRun(sql: Sql, now: Date, r: EndedRun): Promise<void> {
  const { days, state = 'success', ...rest } = r;
  const at = daysAgo(now, days);
  await pastRun(sql, { ...rest, state, createdAt: at, endedAt: at });
}
