import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { finishAttempt } from '../../src/db/attempts/finish-attempt.js';
import { CHANNELS, listen, type Listener } from '../../src/db/notifications.js';
import { transitionRun } from '../../src/db/runs.js';
import { createEventFeed, type EventFeed } from '../../src/feed/event-feed.js';
import { createSpanRecorder } from '../../src/tracing/span-recorder.js';
import type { SpanRecord, Tracing } from '../../src/tracing/tracing.js';
import { attemptFixtures } from '../helpers/attempt-fixtures.js';
import { dag, task } from '../helpers/spec-builders.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';
import { waitFor } from '../helpers/leoflow-process.js';

/**
 * The leader's span recorder against the real events log: it saves its place, so the next leader
 * makes the spans of what ended while no replica recorded, and nothing twice; a place saved long
 * ago is not gone back to.
 */

let db: TestDatabase;
let feed: EventFeed;
let listener: Listener;
const logger = pino({ level: 'silent' });
const fx = attemptFixtures(() => db.sql, 'subprocess');
const ok = { exitCode: 0, signal: null, error: null, outcome: 'success' as const };

/** What an exporter would be handed. */
function collector(): Tracing & { spans: SpanRecord[] } {
  const spans: SpanRecord[] = [];
  return { spans, record: (s) => void spans.push(s), close: async () => {} };
}

beforeAll(async () => {
  db = await createTestDatabase();
  feed = createEventFeed(db.sql, logger);
  listener = listen(db.url, logger, (channel) => channel === CHANNELS.events && feed.notified());
});

afterAll(async () => {
  feed?.close();
  await listener?.close();
  await db?.drop();
});

async function endedAttempt(spec: ReturnType<typeof dag>, taskId: string) {
  const { run, tis } = await fx.runningRun(spec);
  const a = await fx.started(run.id, tis.get(taskId)!);
  expect(await finishAttempt(db.sql, a, ok)).toBe('success');
  return { run, a };
}

describe('span recorder', () => {
  it('goes on from the place the last leader saved: spans of what ended meanwhile, none twice', async () => {
    const spec = dag('rec', [task('t')]);
    const first = collector();
    const a = createSpanRecorder({ sql: db.sql, feed, tracing: first, logger });
    a.lead(true);
    await new Promise((r) => setTimeout(r, 300)); // its starting place is read
    const one = await endedAttempt(spec, 't');
    await waitFor('the first attempt recorded', async () => first.spans.length === 1, 10_000);
    expect(first.spans[0]).toMatchObject({ name: 'attempt t', attributes: { 'leoflow.run_id': one.run.id } });
    await a.close();

    // No leader records now: an attempt and a run end.
    const two = await endedAttempt(spec, 't');
    expect(await transitionRun(db.sql, two.run.id, 'success')).toBe(true);

    const next = collector();
    const b = createSpanRecorder({ sql: db.sql, feed, tracing: next, logger });
    b.lead(true);
    await waitFor('what ended meanwhile recorded', async () => next.spans.length === 2, 10_000);
    expect(next.spans.map((s) => `${s.name} ${s.attributes['leoflow.run_id']}`).sort()).toEqual([
      `attempt t ${two.run.id}`,
      `run rec ${two.run.id}`,
    ]);
    // Leadership lost, then taken again by the same replica: it goes on, no span twice.
    b.lead(false);
    b.lead(true);
    const three = await endedAttempt(spec, 't');
    await waitFor('the next end recorded', async () => next.spans.length === 3, 10_000);
    expect(next.spans[2]!.attributes['leoflow.run_id']).toBe(three.run.id);
    await b.close();
    expect(next.spans).toHaveLength(3);
    // The feed holds no watcher of theirs, and never counted them as clients.
    expect(feed.watchers()).toBe(0);
  }, 30_000);

  it('does not go back to a place saved long ago', async () => {
    const spec = dag('old', [task('t')]);
    await endedAttempt(spec, 't');
    await db.sql`update trace_export set saved_at = now() - interval '2 hours'`;
    const late = collector();
    const c = createSpanRecorder({ sql: db.sql, feed, tracing: late, logger });
    c.lead(true);
    await new Promise((r) => setTimeout(r, 500));
    const fresh = await endedAttempt(spec, 't');
    await waitFor('the new end recorded', async () => late.spans.length >= 1, 10_000);
    await c.close();
    expect(late.spans.map((s) => s.attributes['leoflow.run_id'])).toEqual([fresh.run.id]);
  }, 30_000);
});
