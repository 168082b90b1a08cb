import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { createTestDatabase } from '../helpers/test-database.js';
import { percentile, report } from './report.js';

/**
 * event-insert: what the event feed adds to every `events` insert, A/B in one database. Migration
 * 011 numbers `seq` with a plpgsql function that takes the transaction id first
 * (`leoflow_next_event_seq()`, instead of the identity's plain nextval) and adds a statement-level
 * trigger that NOTIFYs `leoflow_events` (one a transaction at commit); migration 031's trigger also
 * names the runs its rows concern, from a transition table, so only their log followers wake. The
 * variants switch those parts off and on in place (`seq`'s default back to `nextval('events_seq')`,
 * one trigger or none enabled; 011's trigger is made again here beside 031's), alternating in
 * rounds so drift on a shared machine falls on all of them alike; one session LISTENs throughout,
 * as each replica does.
 *
 * Two shapes: one event a transaction (autocommit, one after the other: the trigger and the commit's
 * NOTIFY weigh most here), and 20 events a statement (a planner's write of many moves).
 *
 *   npx vitest run --config test/bench/vitest.config.ts test/bench/event-insert.bench.ts
 *
 * LEOFLOW_BENCH_EVENT_ROUNDS (6), LEOFLOW_BENCH_EVENT_SINGLE (1000), LEOFLOW_BENCH_EVENT_BATCHES (200).
 */

const ROUNDS = Number(process.env.LEOFLOW_BENCH_EVENT_ROUNDS ?? 6);
const SINGLE = Number(process.env.LEOFLOW_BENCH_EVENT_SINGLE ?? 1000);
const BATCHES = Number(process.env.LEOFLOW_BENCH_EVENT_BATCHES ?? 200);
const BATCH_ROWS = 20;

interface Variant {
  name: string;
  seqFunction: boolean;
  /** The NOTIFY trigger enabled: 011's (no payload), 031's (the runs named), or none. */
  trigger: 'events_written_011' | 'events_written' | null;
}

const VARIANTS: Variant[] = [
  { name: 'before 011 (nextval, no trigger)', seqFunction: false, trigger: null },
  { name: 'seq function only', seqFunction: true, trigger: null },
  { name: "011's feed (seq, NOTIFY '')", seqFunction: true, trigger: 'events_written_011' },
  { name: '031 as shipped (NOTIFY names runs)', seqFunction: true, trigger: 'events_written' },
];

describe('event-insert', () => {
  it("migration 011's cost on an events insert, A/B", async () => {
    const db = await createTestDatabase();
    const listener = new pg.Client({ connectionString: db.url });
    const client = new pg.Client({ connectionString: db.url });
    await listener.connect();
    await client.connect();
    let notified = 0;
    listener.on('notification', () => notified++);
    await listener.query('listen leoflow_events');
    await client.query(`create function leoflow_events_written_011() returns trigger language plpgsql as $$
      begin perform pg_notify('leoflow_events', ''); return null; end $$`);
    await client.query(`create trigger events_written_011 after insert on events
      for each statement execute function leoflow_events_written_011()`);
    try {
      const set = async (v: Variant) => {
        await client.query(
          `alter table events alter column seq set default ${v.seqFunction ? 'leoflow_next_event_seq()' : "nextval('events_seq')"}`,
        );
        for (const t of ['events_written_011', 'events_written'])
          await client.query(`alter table events ${v.trigger === t ? 'enable' : 'disable'} trigger ${t}`);
      };
      const single = (ms: number[]) => async () => {
        for (let i = 0; i < SINGLE; i++) {
          const t0 = performance.now();
          await client.query(`insert into events (run_id, kind, payload) values (1, 'bench', '{"i":1}')`);
          ms.push(performance.now() - t0);
        }
      };
      const values = Array.from({ length: BATCH_ROWS }, () => `(1, 'bench', '{"i":1}'::jsonb)`).join(', ');
      const batched = (ms: number[]) => async () => {
        for (let i = 0; i < BATCHES; i++) {
          const t0 = performance.now();
          await client.query(`insert into events (run_id, kind, payload) values ${values}`);
          ms.push(performance.now() - t0);
        }
      };
      // Warm-up: plans cached, the function compiled, the table's pages in memory.
      for (const v of VARIANTS) {
        await set(v);
        await single([])();
        await batched([])();
      }
      const samples = new Map(
        VARIANTS.map((v) => [
          v.name,
          {
            single: [] as number[],
            batched: [] as number[],
            singleRounds: [] as number[],
            batchedRounds: [] as number[],
          },
        ]),
      );
      for (let r = 0; r < ROUNDS; r++) {
        // Each round in another order, so no variant always runs first or last.
        const order = VARIANTS.map((_, i) => VARIANTS[(i + r) % VARIANTS.length]!);
        for (const v of order) {
          await set(v);
          const s = samples.get(v.name)!;
          const a: number[] = [];
          const b: number[] = [];
          await single(a)();
          await batched(b)();
          s.single.push(...a);
          s.batched.push(...b);
          s.singleRounds.push(percentile(a, 50));
          s.batchedRounds.push(percentile(b, 50));
        }
      }
      // Medians, not means: on a shared machine a neighbour's burst lands in a few inserts of one
      // round and swings a mean. Each round's median is divided by the baseline's in the same
      // round; the table gives the median of those ratios and their range.
      const base = samples.get(VARIANTS[0]!.name)!;
      const ratio = (mine: number[], theirs: number[]) => {
        const rs = mine.map((m, i) => m / theirs[i]!);
        return `${percentile(rs, 50).toFixed(3)}x (${Math.min(...rs).toFixed(2)}–${Math.max(...rs).toFixed(2)})`;
      };
      const rows = VARIANTS.map((v) => {
        const s = samples.get(v.name)!;
        return {
          variant: v.name,
          '1/xact p50 ms': percentile(s.single, 50).toFixed(3),
          '1/xact p99 ms': percentile(s.single, 99).toFixed(3),
          '1/xact ratio': ratio(s.singleRounds, base.singleRounds),
          '20/stmt p50 ms': percentile(s.batched, 50).toFixed(3),
          '20/stmt p99 ms': percentile(s.batched, 99).toFixed(3),
          '20/stmt ratio': ratio(s.batchedRounds, base.batchedRounds),
        };
      });
      await report('event-insert', rows, {
        rounds: ROUNDS,
        single: SINGLE,
        batches: BATCHES,
        batchRows: BATCH_ROWS,
        notified,
      });
      expect(notified).toBeGreaterThan(0);
    } finally {
      await client.end();
      await listener.end();
      await db.drop();
    }
  });
});
