import { randomBytes } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Code, ConnectError } from '@connectrpc/connect';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import { startServer, type ServerProcess } from '../helpers/leoflow-process.js';
import { metricSum, scrapeMetrics } from '../helpers/scrape-metrics.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';

/**
 * Issue 38: one client's flood of writes costs that client alone. Past `--max-token-writes` a
 * second, its writes are refused with RESOURCE_EXHAUSTED, naming the limit and, in the trailers,
 * how long to wait; another token's writes go on; the refusals are counted.
 */

const ADMIN = randomBytes(32).toString('base64url');
let db: TestDatabase;
const servers: ServerProcess[] = [];
let dagFile: string;

beforeAll(async () => {
  db = await createTestDatabase();
  dagFile = path.join(os.tmpdir(), `leoflow-bounds-${process.pid}.yaml`);
  await writeFile(dagFile, 'dag_id: w\ntasks:\n  - {id: a, command: ["true"]}\n');
});
afterAll(async () => {
  for (const s of servers) await s.kill();
  await db?.drop();
});

/** How `n` writes at once of one client ended: the codes, and the first refusal. */
async function flood(n: number, write: () => Promise<unknown>) {
  const ended = await Promise.all(
    Array.from({ length: n }, () =>
      write().then(
        () => null,
        (err: unknown) => ConnectError.from(err),
      ),
    ),
  );
  return { passed: ended.filter((e) => e === null).length, refused: ended.filter((e) => e !== null) };
}

describe('--max-token-writes', () => {
  it('refuses a token past its writes a second, says how long to wait, and holds no other token back', async () => {
    const s = await startServer({
      env: { DATABASE_URL: db.url, LEOFLOW_INSECURE: undefined, LEOFLOW_AGENT_TOKEN: undefined },
      args: ['--edition', 'pro', '--executor', 'subprocess', '--bootstrap-admin-token', ADMIN, '--dags', dagFile],
    });
    servers.push(s);
    const admin = createClients(s.url, null, ADMIN);
    const floodSecret = (await admin.tokens.createToken({ name: 'f', role: 'operator' })).secret;
    // Eight connections: one HTTP/2 connection holds 100 calls in flight, and paces the rest itself.
    const connections = Array.from({ length: 8 }, () => createClients(s.url, null, floodSecret));
    const flooder = connections[0]!;
    const other = createClients(s.url, null, (await admin.tokens.createToken({ name: 'o', role: 'operator' })).secret);

    const t = performance.now();
    let n = 0;
    const f = await flood(800, () => connections[n++ % 8]!.workflow.triggerRun({ dagId: 'w' }));
    const seconds = (performance.now() - t) / 1000;
    // 200 at once (the default), and 200 a second more while the 800 came in; the rest refused.
    expect(f.passed).toBeGreaterThanOrEqual(200);
    expect(f.passed).toBeLessThanOrEqual(200 + Math.ceil(seconds * 200));
    expect(f.refused.length).toBeGreaterThan(0);
    for (const err of f.refused) expect(err!.code, String(err)).toBe(Code.ResourceExhausted);
    expect(f.refused[0]!.rawMessage).toMatch(
      /^TriggerRun: API token "[^"]+" made more than 200 writes a second, the limit \(--max-token-writes 200\): retry in \d+ ms$/,
    );
    expect(Number(f.refused[0]!.metadata.get('retry-after-ms'))).toBeGreaterThan(0);
    // Another token writes meanwhile; reads are not writes.
    expect((await other.workflow.triggerRun({ dagId: 'w' })).created).toBe(true);
    expect((await flooder.workflow.listRuns({ dagId: 'w', limit: 1 })).runs).toHaveLength(1);
    expect(metricSum(await scrapeMetrics(s.metricsUrl), 'leoflow_api_limited_total')).toBe(f.refused.length);
    // Nothing refused was written: the runs are the writes let through, and the other token's one.
    const [row] = await db.sql<{ n: number }[]>`select count(*)::int as n from dag_runs`;
    expect(row!.n).toBe(f.passed + 1);
    // Waiting as told lets the next write in.
    await new Promise((r) => setTimeout(r, Number(f.refused.at(-1)!.metadata.get('retry-after-ms')) + 50));
    expect((await flooder.workflow.triggerRun({ dagId: 'w' })).created).toBe(true);
  });
});
