import type { Logger } from 'pino';
import { attemptInputs } from '../db/attempts/attempt-inputs.js';
import { flushHeartbeats } from '../db/attempts/flush-heartbeats.js';
import { notePendingReason } from '../db/attempts/note-pending-reason.js';
import { finishFromCache } from '../db/cache/finish-from-cache.js';
import { takeCacheEntry } from '../db/cache/take-cache-entry.js';
import type { Sql } from '../db/sql.js';
import { CacheGate } from '../dispatch/cache-gate.js';

/** The completion cache's gate of one replica, on its database (dispatch/cache-gate.ts). */
export function createCacheGate(sql: Sql, logger: Logger, ended: (runId: string) => void): CacheGate {
  return new CacheGate({
    logger: logger.child({ component: 'cache' }),
    ended,
    store: {
      inputs: (a) => attemptInputs(sql, a),
      take: (a, keyHash) =>
        takeCacheEntry(sql, {
          tiId: a.tiId,
          tryNumber: a.tryNumber,
          attemptToken: a.attemptToken,
          dagId: a.dagId,
          taskId: a.taskId,
          specHash: a.cache!.specHash,
          keyHash,
          ttlMs: a.cache!.ttlMs,
        }),
      finishFromCache: (a, hit, keyHash) => finishFromCache(sql, a, { value: hit.value, keyHash, source: hit.source }),
      heartbeat: async (a) => (await flushHeartbeats(sql, [a])).has(a.tiId),
      pending: (a, reason) => notePendingReason(sql, a, reason),
    },
  });
}
