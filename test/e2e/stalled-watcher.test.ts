import http2 from 'node:http2';
import { create, toBinary } from '@bufbuild/protobuf';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import { WatchRunsRequestSchema, type RunEvent } from '../../src/gen/leoflow/v1/workflow_pb.js';
import { cli, scratchDir, startServer, waitFor, type ServerProcess } from '../helpers/leoflow-process.js';
import { metricSum, scrapeMetrics } from '../helpers/scrape-metrics.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';

/**
 * A watcher that never reads, through the real gRPC server (issue 26): its HTTP/2 window is shut
 * (initial window 0, never opened), so the server's writes to it block. (A paused grpc-js call is
 * no such watcher: its HTTP/2 session kept taking, and holding, all 4,477 events of a trial, so the
 * server was never held up.) While runs make a few
 * thousand state changes, the server must cut it off (RST_STREAM ENHANCE_YOUR_CALM, which gRPC
 * clients read as RESOURCE_EXHAUSTED) and forget it, a reading watcher beside it must get every
 * event, and the scheduler's steps must stay fast.
 */

let db: TestDatabase;
let server: ServerProcess;
const BUFFER = 500;
const TASKS = 30;
const RUNS = 12;

beforeAll(async () => {
  db = await createTestDatabase();
  server = await startServer({
    env: { DATABASE_URL: db.url },
    args: ['--watch-buffer', String(BUFFER), '--dispatch-workers', '4', '--dispatch-queue', '64'],
  });
  const dir = scratchDir('leoflow-stalled-');
  const tasks = Array.from({ length: TASKS }, (_, i) => `  - id: t${i}\n    command: ["true"]\n`).join('');
  await writeFile(path.join(dir, 'fan.yaml'), `dag_id: fan\ntasks:\n${tasks}`);
  const r = await cli(server.url, ['dag', 'apply', path.join(dir, 'fan.yaml')]);
  expect(r.code, r.stderr).toBe(0);
}, 60_000);

afterAll(async () => {
  await server?.stop();
  await db?.drop();
});

/** The step histogram's buckets (le → cumulative count) and count. */
async function steps(): Promise<{ count: number; le: Map<string, number> }> {
  const m = await scrapeMetrics(server.metricsUrl);
  const le = new Map<string, number>();
  for (const [k, v] of m) {
    const b = /^leoflow_tick_duration_seconds_bucket\{le="([^"]+)"\}$/.exec(k);
    if (b) le.set(b[1]!, v);
  }
  return { count: metricSum(m, 'leoflow_tick_duration_seconds_count'), le };
}

async function watchers(): Promise<number> {
  return metricSum(await scrapeMetrics(server.metricsUrl), 'leoflow_watchers_connected');
}

describe('a watcher that does not read', () => {
  it('is cut off with ENHANCE_YOUR_CALM (RESOURCE_EXHAUSTED) and forgotten, while a reading watcher gets everything and steps stay fast', async () => {
    const [row] = await db.sql<{ last: string }[]>`select coalesce(max(seq), 0)::text as last from events`;
    const from = row!.last;

    // The stalled watcher: a raw HTTP/2 client that grants no stream window and never reads.
    const session = http2.connect(server.url, { settings: { initialWindowSize: 0 } });
    session.on('error', () => {});
    const stalled = session.request({
      ':method': 'POST',
      ':path': '/leoflow.v1.WorkflowService/WatchRuns',
      'content-type': 'application/grpc',
      te: 'trailers',
    });
    const body = toBinary(WatchRunsRequestSchema, create(WatchRunsRequestSchema, { afterSeq: from }));
    const frame = Buffer.alloc(5 + body.length);
    frame.writeUInt32BE(body.length, 1);
    Buffer.from(body).copy(frame, 5);
    stalled.end(frame);
    stalled.on('error', () => {});
    let closedAt = 0;
    const closed = new Promise<number>((resolve) =>
      stalled.on('close', () => {
        closedAt = Date.now();
        resolve(stalled.rstCode ?? -1);
      }),
    );

    // The reading watcher, beside it on its own connection.
    const api = createClients(server.url);
    const ac = new AbortController();
    const read: RunEvent[] = [];
    const reading = (async () => {
      try {
        for await (const res of api.workflow.watchRuns({ dagId: 'fan', afterSeq: from }, { signal: ac.signal }))
          read.push(...res.events);
      } catch (err) {
        if (!ac.signal.aborted) throw err;
      }
    })();
    try {
      await waitFor('both watchers registered', async () => (await watchers()) === 2, 10_000, 50);

      const before = await steps();
      const t0 = Date.now();
      for (let i = 0; i < RUNS; i++) await api.workflow.triggerRun({ dagId: 'fan', confJson: '', runKey: '' });
      await waitFor(
        'every run ended',
        async () => {
          const [r] = await db.sql<{ n: number }[]>`select count(*)::int as n from dag_runs where state = 'success'`;
          return r!.n === RUNS;
        },
        60_000,
        200,
      );
      const events = await db.sql<{ seq: string }[]>`
        select e.seq::text as seq from events e join dag_runs r on r.id = e.run_id where e.seq > ${from} and r.dag_id = 'fan' order by e.seq`;
      expect(events.length).toBeGreaterThan(4 * BUFFER);

      // The server cut the stalled stream (no later than the grace after it fell behind) and forgot it.
      const code = await Promise.race([
        closed,
        new Promise<string>((r) => setTimeout(() => r('still open 15 s after the runs ended'), 15_000)),
      ]);
      expect(code).toBe(http2.constants.NGHTTP2_ENHANCE_YOUR_CALM);
      const cutAfterMs = closedAt - t0;
      // Said in the server's log (read from its stdout, which may come after the reset reached us).
      await waitFor(
        'the reset logged',
        async () =>
          server.logs.some(
            (l) => l.msg === 'watcher fell behind and does not read: its stream is reset' && l.buffer === BUFFER,
          ),
        5_000,
        50,
      );
      await waitFor('the stalled watcher forgotten', async () => (await watchers()) === 1, 5_000, 50);

      // The reader has every event of the runs, in order, each once.
      await waitFor('the reader caught up', async () => read.length >= events.length, 10_000, 50);
      expect(read.map((e) => e.seq)).toEqual(events.map((e) => e.seq));

      // Steps stayed fast throughout (a shared machine may slow the odd one): none reached a
      // second (the tick alert's threshold), nine in ten under 100 ms.
      const after = await steps();
      const within = (le: string) => (after.le.get(le) ?? 0) - (before.le.get(le) ?? 0);
      const n = after.count - before.count;
      console.log(
        `stalled watcher cut ${cutAfterMs} ms after the first trigger; ${events.length} events; ${n} steps: ${within('0.05')} under 50 ms, ${within('0.1')} under 100 ms, ${within('1')} under 1 s`,
      );
      expect(n).toBeGreaterThan(0);
      expect(within('1')).toBe(n);
      expect(within('0.1')).toBeGreaterThanOrEqual(0.9 * n);
    } finally {
      ac.abort();
      await reading.catch(() => {});
      session.destroy();
    }
  }, 120_000);
});
