import { createContextValues } from '@connectrpc/connect';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CHANNELS, listen, type Listener } from '../../src/db/notifications.js';
import { createChangeSignal, type ChangeSignal } from '../../src/server/api/change-signal.js';
import { workflowServiceOn } from '../helpers/workflow-service-on.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';

/**
 * A following TailLogs is pushed (issue 26): a line written is sent at once, woken by the
 * `task_logs` NOTIFY, well inside the 2 s a follower waits when nothing wakes it. And only its own
 * run's changes wake it (issue 38): another run's lines and events cost it no read.
 */

type Handler = (req: never, ctx: never) => AsyncIterable<{ lines: { line: string }[] }>;
let db: TestDatabase;
let listener: Listener;
let workflow: Record<string, Handler>;
const logger = pino({ level: 'silent' });
const signal = createChangeSignal();
/** How many times a follower went to wait: each time after it read its run again. */
let waits = 0;
const changes: ChangeSignal = {
  wait: (...args) => (waits++, signal.wait(...args)),
  fire: (payload) => signal.fire(payload),
};

beforeAll(async () => {
  db = await createTestDatabase();
  workflow = workflowServiceOn(db.sql, { logger, changes }) as unknown as Record<string, Handler>;
  listener = listen(db.url, logger, (channel, payload) => {
    if (channel === CHANNELS.logs || channel === CHANNELS.events) changes.fire(payload);
  });
});

afterAll(async () => {
  await listener?.close();
  await db?.drop();
});

describe('TailLogs --follow', () => {
  it('sends a line as soon as it is written, not at an interval', async () => {
    const call = (name: string, req: Record<string, unknown>, signal = new AbortController().signal) =>
      workflow[name]!(req as never, { signal, requestHeader: new Headers(), values: createContextValues() } as never);
    await (call('applyDag', {
      source: 'dag_id: logs\ntasks:\n  - id: a\n    command: ["true"]\n',
      filename: 'l.yaml',
    }) as unknown as Promise<unknown>);
    const { run } = await (call('triggerRun', { dagId: 'logs', confJson: '', runKey: '' }) as unknown as Promise<{
      run: { runId: string };
    }>);
    const [ti] = await db.sql<{ id: string }[]>`select id::text as id from task_instances where run_id = ${run.runId}`;
    const ac = new AbortController();
    const it = call('tailLogs', { runId: run.runId, taskId: '', tryNumber: 0, follow: true }, ac.signal)[
      Symbol.asyncIterator
    ]();
    // The follower's first read finds nothing and waits.
    const first = it.next();
    await new Promise((r) => setTimeout(r, 300));
    const writtenAt = performance.now();
    await db.sql`insert into task_logs (ti_id, try_number, seq, stream, line) values (${ti!.id}, 1, 1, 'stdout', 'hello')`;
    const got = await first;
    const ms = performance.now() - writtenAt;
    expect(got.value.lines.map((l: { line: string }) => l.line)).toEqual(['hello']);
    expect(ms).toBeLessThan(1_500);
    ac.abort();
    await it.return?.(undefined);
  });

  it("is not woken by another run's lines and events", async () => {
    const call = (name: string, req: Record<string, unknown>, signal = new AbortController().signal) =>
      workflow[name]!(req as never, { signal, requestHeader: new Headers(), values: createContextValues() } as never);
    const trigger = async () =>
      (
        await (call('triggerRun', { dagId: 'logs', confJson: '', runKey: '' }) as unknown as Promise<{
          run: { runId: string };
        }>)
      ).run.runId;
    const followed = await trigger();
    const other = await trigger();
    const [ti] = await db.sql<{ id: string }[]>`select id::text as id from task_instances where run_id = ${other}`;
    const ac = new AbortController();
    const it = call('tailLogs', { runId: followed, taskId: '', tryNumber: 0, follow: true }, ac.signal)[
      Symbol.asyncIterator
    ]();
    const next = it.next();
    await new Promise((r) => setTimeout(r, 300));
    const before = waits;
    // Twenty transactions of lines and twenty of events, all of the other run.
    for (let i = 1; i <= 20; i++) {
      await db.sql`insert into task_logs (ti_id, try_number, seq, stream, line) values (${ti!.id}, 1, ${i}, 'stdout', 'x')`;
      await db.sql`insert into events (run_id, kind, payload) values (${other}, 'test.noise', '{}')`;
    }
    await new Promise((r) => setTimeout(r, 500));
    // Within the 2 s backstop, the follower never went back to read.
    expect(waits - before).toBe(0);
    ac.abort();
    await next;
    await it.return?.(undefined);
  });
});
