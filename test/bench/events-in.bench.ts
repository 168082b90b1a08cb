import { createHmac } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import { cli, startServer } from '../helpers/leoflow-process.js';
import { createTestDatabase } from '../helpers/test-database.js';
import { machine, percentile, report } from './report.js';

/**
 * events-in: events sent in a second, and each one's latency, on Lite with its defaults (writes
 * limited per caller: the bench raises --max-token-writes so the bound measured is the server's):
 * SendEvent over gRPC with no DAG triggered (the event's own write), SendEvent starting a run each
 * (the event and its run in one transaction), TriggerRun as a yardstick, and signed webhooks over
 * HTTP/1.1 (no run). Each with CONCURRENCY callers in flight, from this process.
 */

const EVENTS = Number(process.env.LEOFLOW_BENCH_EVENTS ?? 2000);
const CONCURRENCY = 10;
const KEY = 'bench-webhook-key-of-32-characters';

async function drive(n: number, send: (i: number) => Promise<void>): Promise<{ perS: number; ms: number[] }> {
  const ms: number[] = [];
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      for (let i = next++; i < n; i = next++) {
        const t = performance.now();
        await send(i);
        ms.push(performance.now() - t);
      }
    }),
  );
  return { perS: n / ((performance.now() - t0) / 1000), ms };
}

describe('events-in', () => {
  it('measures SendEvent and webhook deliveries a second', async () => {
    const tmp = await mkdtemp(path.join(os.tmpdir(), 'leoflow-bench-events-'));
    const db = await createTestDatabase();
    const hooks = path.join(tmp, 'hooks.yaml');
    await writeFile(
      hooks,
      'hooks:\n  - name: bench\n    secret: { env: BENCH_HOOK_KEY }\n    key_header: X-Delivery\n',
    );
    const s = await startServer({
      env: { DATABASE_URL: db.url, BENCH_HOOK_KEY: KEY },
      args: ['--hooks', hooks, '--max-token-writes', '100000'],
    });
    try {
      const dag = path.join(tmp, 'on.yaml');
      await writeFile(dag, 'dag_id: on\ntriggers: [{ event: go }]\ntasks: [{ id: t, command: ["true"] }]\n');
      expect((await cli(s.url, ['dag', 'apply', dag])).code).toBe(0);
      const api = createClients(s.url);
      const loadBefore = os.loadavg();
      const quiet = await drive(EVENTS, async (i) => {
        await api.workflow.sendEvent({ name: 'nobody', payloadJson: `{"i":${i}}`, eventKey: `q-${i}` });
      });
      const runs = await drive(EVENTS / 4, async (i) => {
        const r = await api.workflow.sendEvent({ name: 'go', payloadJson: `{"i":${i}}`, eventKey: `g-${i}` });
        expect(r.runs.length).toBe(1);
      });
      // The yardstick: a run started by TriggerRun, the same write as a run an event starts, less the event.
      const trigger = await drive(EVENTS / 4, async () => {
        await api.workflow.triggerRun({ dagId: 'on' });
      });
      const hook = await drive(EVENTS, async (i) => {
        const body = `{"i":${i}}`;
        const res = await fetch(`${s.url}/hooks/bench`, {
          method: 'POST',
          headers: {
            'x-hub-signature-256': `sha256=${createHmac('sha256', KEY).update(body).digest('hex')}`,
            'x-delivery': `h-${i}`,
          },
          body,
        });
        expect(res.status).toBe(200);
        await res.arrayBuffer();
      });
      const row = (what: string, r: { perS: number; ms: number[] }) => ({
        what,
        per_s: Math.round(r.perS),
        p50_ms: Math.round(percentile(r.ms, 50) * 10) / 10,
        p99_ms: Math.round(percentile(r.ms, 99) * 10) / 10,
      });
      await report(
        'events-in',
        [
          row('SendEvent, no DAG triggered', quiet),
          row('SendEvent, a run started each', runs),
          row('TriggerRun (yardstick)', trigger),
          row('webhook (HMAC, HTTP/1.1), no run', hook),
        ],
        { machine: machine(), loadavgBefore: loadBefore, loadavgAfter: os.loadavg(), concurrency: CONCURRENCY },
      );
    } finally {
      await s.stop();
      await db.drop();
      await rm(tmp, { recursive: true, force: true });
    }
  }, 300_000);
});
