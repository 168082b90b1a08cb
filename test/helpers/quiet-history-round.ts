import pino from 'pino';
import {
  createHistoryRound,
  type HistoryKeeperCounters,
  type HistoryRoundOptions,
} from '../../src/scheduler/history-round.js';

/** What a test sets of a history round: the rest logs nothing and counts nothing. */
export type QuietHistoryRoundOptions = Omit<HistoryRoundOptions, 'logger' | 'counters' | 'now'> & {
  /** The clock; the machine's unless given. */
  now?: () => Date;
  /** The counters the test reads; the others do nothing. */
  counters?: Partial<HistoryKeeperCounters>;
};

/** `createHistoryRound` with a silent logger, the machine's clock and no-op counters unless given. */
export function quietHistoryRound(o: QuietHistoryRoundOptions): ReturnType<typeof createHistoryRound> {
  return createHistoryRound({
    ...o,
    logger: pino({ level: 'silent' }),
    now: o.now ?? (() => new Date()),
    counters: {
      runsRemoved: () => {},
      partitionAdded: () => {},
      partitionDropped: () => {},
      rowsSwept: () => {},
      agentsForgotten: () => {},
      error: () => {},
      ...o.counters,
    },
  });
}
