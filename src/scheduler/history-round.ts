import type { Logger } from 'pino';
import { forgetOldEvents } from '../db/external-events/forget-old-events.js';
import { forgetGoneAgents } from '../db/forget-gone-agents.js';
import { addPartitionAhead } from '../db/history/add-partition-ahead.js';
import { dropEmptyPartition, ownerRangeEmpty } from '../db/history/drop-empty-partition.js';
import { EVENTS, HISTORY_TABLES, TASK_LOGS, type HistoryTable } from '../db/history/history-tables.js';
import { currentPartition, listPartitions, maxOwnerId, type Partition } from '../db/history/list-partitions.js';
import { pageOfFinishedRuns } from '../db/history/page-of-finished-runs.js';
import { removeExpiredRuns } from '../db/history/remove-expired-runs.js';
import { removeExpiredCache } from '../db/cache/remove-expired-cache.js';
import { onlyUnfinishedOwnersLeft, sweepOrphans } from '../db/history/sweep-orphans.js';
import type { Sql } from '../db/sql.js';

/** Runs read per round, and the task instances one round removes at most (with their runs). */
const SCAN_RUNS = 1000;
const MAX_TIS_PER_ROUND = 5000;
/** Rows of history one round deletes at most from a partition that cannot be dropped. */
const SWEEP_ROWS = 5000;
/** How long a partition drop waits for the table's lock before a later round tries again. */
const DROP_LOCK_TIMEOUT_MS = 100;
/** Every partition is looked at again this often (another replica's `db clean` may have emptied one). */
const FULL_CHECK_MS = 10 * 60_000;
/** Agents one round forgets at most. */
export const FORGET_AGENTS_PER_ROUND = 500;
/** Completion cache entries past their ttl that one round removes at most. */
export const EXPIRED_CACHE_PER_ROUND = 5000;
/** Events sent in that one round forgets at most. */
export const FORGET_EVENTS_PER_ROUND = 5000;

/** What the history rounds count (Prometheus in production). */
export interface HistoryKeeperCounters {
  runsRemoved(runs: number, taskInstances: number): void;
  partitionAdded(table: string): void;
  partitionDropped(table: string): void;
  rowsSwept(table: string, rows: number): void;
  /** Agents gone longer than the agent retention, forgotten. */
  agentsForgotten(agents: number): void;
  /** An error caught in a round (the round went on with its other parts). */
  error(err: unknown, ids: Record<string, unknown>): void;
}

export interface HistoryRoundOptions {
  sql: Sql;
  logger: Logger;
  /** Finished runs are removed this long after they ended; null keeps them (partitions are still added). */
  retentionMs: number | null;
  /** Agents with no live stream and no attempt are forgotten this long after they were last
   *  seen; null remembers them. */
  agentRetentionMs: number | null;
  /** A stream is live while its agent was seen this recently (see `agentForgettable`). */
  agentLiveMs: number;
  now(): Date;
  counters: HistoryKeeperCounters;
}

/** What one round did. */
export interface HistoryRound {
  partitionsAdded: number;
  runsRemoved: number;
  partitionsDropped: number;
  rowsSwept: number;
  agentsForgotten: number;
  /** Whether more is waiting (the next round comes soon). */
  more: boolean;
}

/** Partitions a round has still to look at, by table, and where a sweep of one goes on from. */
interface Dirty {
  names: Set<string>;
  sweepFrom: Map<string, bigint>;
}

/** A partition has nothing more to do this pass. */
function done(d: Dirty, name: string): void {
  d.names.delete(name);
  d.sweepFrom.delete(name);
}

/**
 * One round of the leader's upkeep of finished history, bounded (a thousand runs read, a few
 * thousand task instances removed, one partition dropped or a few thousand rows swept per table):
 * adds the next partitions of the history tables ahead of need; removes a batch of runs whose
 * retention has passed, with their task instances; drops partitions that have no run (task
 * instance) left; and deletes what is left of removed runs in partitions that a run still going
 * keeps from being dropped; and forgets a batch of agents gone longer than the agent retention.
 * Keeps between rounds where its reading of runs is and which partitions it has yet to look at;
 * `fresh` (a new leader, which knows nothing of what the last one left half done) starts both
 * over.
 */
export class HistoryUpkeep {
  readonly #o: HistoryRoundOptions;
  readonly #logger: HistoryRoundOptions['logger'];
  #lastFullCheck = 0;
  /** Where the reading of runs goes on from, within one pass over the runs below the cutoff. */
  #cursor = '0';
  readonly #dirty = new Map<string, Dirty>(
    HISTORY_TABLES.map((t) => [t.name, { names: new Set(), sweepFrom: new Map() }]),
  );

  constructor(o: HistoryRoundOptions) {
    this.#o = o;
    this.#logger = o.logger.child({ component: 'history' });
  }

  /** One round; `fresh` for a new leader (see the class). */
  async round(fresh: boolean): Promise<HistoryRound> {
    const result: HistoryRound = {
      partitionsAdded: 0,
      runsRemoved: 0,
      partitionsDropped: 0,
      rowsSwept: 0,
      agentsForgotten: 0,
      more: false,
    };
    const now = this.#o.now();
    if (fresh || now.getTime() - this.#lastFullCheck >= FULL_CHECK_MS) await this.#markAllDirty(now, fresh);
    await this.#addPartitionsAhead(now, result);
    if (this.#o.retentionMs !== null) {
      await this.#removeExpiredRuns(now, this.#o.retentionMs, result);
      await this.#forgetOldEvents(now, this.#o.retentionMs, result);
    }
    await this.#tendPartitions(result);
    if (this.#o.agentRetentionMs !== null) await this.#forgetGoneAgents(now, this.#o.agentRetentionMs, result);
    await this.#removeExpiredCache(result);
    if (result.partitionsDropped > 0 || result.rowsSwept > 0) result.more = true;
    return result;
  }

  /**
   * Every range to be looked at again (a probe or two each), and the reading of runs from the
   * start; the default partition, whose sweep reads all of it, only for a new leader.
   */
  async #markAllDirty(now: Date, fresh: boolean): Promise<void> {
    this.#lastFullCheck = now.getTime();
    this.#cursor = '0';
    for (const t of HISTORY_TABLES) {
      await this.#isolated('list partitions', { table: t.name }, async () => {
        const parts = await listPartitions(this.#o.sql, t);
        this.#markDirty(t, parts.ranges, parts.fallback, null, fresh);
      });
    }
  }

  /** The next partitions of the history tables, ahead of need. */
  async #addPartitionsAhead(now: Date, result: HistoryRound): Promise<void> {
    for (const t of HISTORY_TABLES) {
      const added = await this.#isolated('add partition', { table: t.name }, () =>
        addPartitionAhead(this.#o.sql, t, now, this.#o.retentionMs),
      );
      if (added) {
        result.partitionsAdded++;
        this.#o.counters.partitionAdded(t.name);
        this.#logger.info(
          { table: t.name, partition: added.name, from: String(added.from), to: String(added.to) },
          `added partition ${added.name}`,
        );
      }
    }
  }

  /** A batch of runs whose retention has passed, with their task instances; their partitions marked. */
  async #removeExpiredRuns(now: Date, retentionMs: number, result: HistoryRound): Promise<void> {
    const cutoff = new Date(now.getTime() - retentionMs);
    await this.#isolated('remove expired runs', { cutoff: cutoff.toISOString() }, async () => {
      const page = await pageOfFinishedRuns(this.#o.sql, {
        endedBefore: cutoff,
        after: this.#cursor,
        scan: SCAN_RUNS,
        maxTis: MAX_TIS_PER_ROUND,
      });
      this.#cursor = page.next ?? '0';
      if (page.next !== null) result.more = true;
      if (page.ids.length === 0) return;
      const removed = await removeExpiredRuns(this.#o.sql, page.ids, cutoff);
      if (removed.runs === 0) return;
      result.runsRemoved += removed.runs;
      result.more = true;
      this.#o.counters.runsRemoved(removed.runs, removed.taskInstances);
      this.#logger.debug(
        { runs: removed.runs, taskInstances: removed.taskInstances, cutoff },
        'removed finished runs past their retention',
      );
      for (const [t, ids] of [
        [EVENTS, removed.runIds],
        [TASK_LOGS, removed.tiIds],
      ] as const) {
        if (!ids) continue;
        const parts = await listPartitions(this.#o.sql, t);
        this.#markDirty(t, parts.ranges, parts.fallback, ids);
      }
    });
  }

  /** One dirty partition of each history table dropped or swept. */
  async #tendPartitions(result: HistoryRound): Promise<void> {
    for (const t of HISTORY_TABLES) {
      await this.#isolated('tend partitions', { table: t.name }, () => this.#tendOne(t, result));
      if (this.#dirty.get(t.name)!.names.size > 0) result.more = true;
    }
  }

  /** A batch of agents gone longer than the agent retention, forgotten. */
  async #forgetGoneAgents(now: Date, agentRetentionMs: number, result: HistoryRound): Promise<void> {
    const seenBefore = new Date(now.getTime() - agentRetentionMs);
    await this.#isolated('forget gone agents', { seenBefore: seenBefore.toISOString() }, async () => {
      const ids = await forgetGoneAgents(this.#o.sql, {
        seenBefore,
        liveMs: this.#o.agentLiveMs,
        limit: FORGET_AGENTS_PER_ROUND,
      });
      if (ids.length === 0) return;
      result.agentsForgotten = ids.length;
      if (ids.length === FORGET_AGENTS_PER_ROUND) result.more = true;
      this.#o.counters.agentsForgotten(ids.length);
      this.#logger.info(
        { agents: ids.length, agentIds: ids.slice(0, 10), seenBefore },
        `forgot ${ids.length} agent${ids.length === 1 ? '' : 's'} gone longer than the agent retention ` +
          `(last seen before ${seenBefore.toISOString()})`,
      );
    });
  }

  /** Completion cache entries past their own ttl (whatever the run retention): a batch a round. */
  async #removeExpiredCache(result: HistoryRound): Promise<void> {
    await this.#isolated('remove expired cache entries', {}, async () => {
      const removed = await removeExpiredCache(this.#o.sql, EXPIRED_CACHE_PER_ROUND);
      if (removed === EXPIRED_CACHE_PER_ROUND) result.more = true;
      if (removed > 0) this.#logger.info({ entries: removed }, `removed ${removed} cache entries past their ttl`);
    });
  }

  /** A batch of events sent in longer ago than the retention: their senders' keys may be taken again. */
  async #forgetOldEvents(now: Date, retentionMs: number, result: HistoryRound): Promise<void> {
    const before = new Date(now.getTime() - retentionMs);
    await this.#isolated('forget old events', { before: before.toISOString() }, async () => {
      const n = await forgetOldEvents(this.#o.sql, { before, limit: FORGET_EVENTS_PER_ROUND });
      if (n === FORGET_EVENTS_PER_ROUND) result.more = true;
      if (n > 0) this.#logger.debug({ events: n, before }, 'forgot events sent in before the retention');
    });
  }

  async #isolated<T>(what: string, ids: Record<string, unknown>, fn: () => Promise<T>): Promise<T | null> {
    try {
      return await fn();
    } catch (err) {
      this.#o.counters.error(err, { what, ...ids });
      return null;
    }
  }

  /**
   * Marks the partitions of `table` overlapping owner ids [lo, hi], and the default partition
   * unless one range holds them all (it holds rows only of ids no range covered when they were
   * written); without ids, every range, and the default partition too when `withFallback`.
   */
  #markDirty(
    table: HistoryTable,
    parts: Partition[],
    fallback: string | null,
    ids: [bigint, bigint] | null,
    withFallback = false,
  ): void {
    const d = this.#dirty.get(table.name)!;
    const overlaps = (p: Partition, lo: bigint, hi: bigint) =>
      (p.from === null || p.from <= hi) && (p.to === null || lo < p.to);
    const holds = (p: Partition, lo: bigint, hi: bigint) =>
      (p.from === null || p.from <= lo) && (p.to === null || hi < p.to);
    for (const p of parts) if (!ids || overlaps(p, ids[0], ids[1])) d.names.add(p.name);
    if (fallback && (ids ? !parts.some((p) => holds(p, ids[0], ids[1])) : withFallback)) d.names.add(fallback);
  }

  /** Drops or sweeps one dirty partition of `table` (skipping those with nothing to do). */
  async #tendOne(table: HistoryTable, result: HistoryRound): Promise<void> {
    const d = this.#dirty.get(table.name)!;
    if (d.names.size === 0) return;
    const parts = await listPartitions(this.#o.sql, table);
    const maxId = await maxOwnerId(this.#o.sql, table);
    const below = currentPartition(parts, maxId)?.from ?? maxId;
    for (const name of [...d.names]) {
      if (name === parts.fallback) {
        // The default partition is never dropped: what it holds of removed runs is swept.
        const swept = await sweepOrphans(this.#o.sql, table, name, d.sweepFrom.get(name) ?? 0n, SWEEP_ROWS);
        if (swept.deleted > 0) {
          this.#o.counters.rowsSwept(table.name, swept.deleted);
          result.rowsSwept += swept.deleted;
        }
        if (swept.next === null) {
          done(d, name);
        } else d.sweepFrom.set(name, swept.next);
        if (swept.deleted > 0 || swept.next !== null) return;
        continue;
      }
      const p = parts.ranges.find((r) => r.name === name);
      // Gone (dropped by another leader), or a partition new rows still go to: nothing to do.
      if (!p || p.to === null || p.to > below) {
        done(d, name);
        continue;
      }
      if (await ownerRangeEmpty(this.#o.sql, table, p)) {
        if (await dropEmptyPartition(this.#o.sql, table, p, DROP_LOCK_TIMEOUT_MS)) {
          done(d, name);
          this.#o.counters.partitionDropped(table.name);
          result.partitionsDropped++;
          this.#logger.info(
            { table: table.name, partition: name, from: String(p.from), to: String(p.to) },
            `dropped ${name}: no owner of its range is left`,
          );
        }
        return;
      }
      if (await onlyUnfinishedOwnersLeft(this.#o.sql, table, p)) {
        const swept = await sweepOrphans(this.#o.sql, table, name, d.sweepFrom.get(name) ?? p.from ?? 0n, SWEEP_ROWS);
        if (swept.deleted > 0) {
          this.#o.counters.rowsSwept(table.name, swept.deleted);
          result.rowsSwept += swept.deleted;
        }
        if (swept.next === null || (p.to !== null && swept.next >= p.to)) {
          done(d, name);
        } else d.sweepFrom.set(name, swept.next);
        if (swept.deleted > 0) return;
        continue;
      }
      // Finished runs of its range are still kept: their removal will mark it again.
      done(d, name);
    }
  }
}

export function createHistoryRound(o: HistoryRoundOptions): (fresh: boolean) => Promise<HistoryRound> {
  const upkeep = new HistoryUpkeep(o);
  return (fresh) => upkeep.round(fresh);
}
