import { createServer, type Server } from 'node:http';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import { serverLauncher, waitFor, type ServerProcess } from './leoflow-process.js';
import { createTestDatabase, type TestDatabase } from './test-database.js';

/**
 * Issue 41's scenario, for run and task deadlines alike: two replicas share a database and a
 * --notify file; five DAGs whose deadlines fall around the moment the leader is SIGKILLed are
 * triggered, and what was marked and delivered is read back once every miss is delivered.
 */

const FLAGS = ['--leader-watchdog', '1000ms', '--tick-interval', '200ms'];
/** The deadlines, ms from the trigger; the leader dies at KILL_AT_MS, among them. */
export const DEADLINES_MS = [2200, 2600, 3000, 3400, 3800];
const KILL_AT_MS = 3000;

export interface DeadlineFailoverResult {
  runIds: string[];
  /** Per run, how many `eventKind` events it has. */
  missed: { run_id: string; n: number }[];
  /** The notifications, by run. */
  told: { id: string; run_id: string; kind: string; task_id: string | null; state: string }[];
  /** The notification ids the receiver was posted. */
  got: string[];
  /** The replica left after the kill, still running. */
  survivor: ServerProcess;
}

/**
 * Starts the receiver and the database for this test file (its beforeAll and afterAll), and
 * returns the scenario: `source(i, ms)` is the i-th DAG, its deadline `ms` after its trigger.
 */
export function deadlineFailover(tmpPrefix: string) {
  let db: TestDatabase;
  let tmp: string;
  let receiver: Server;
  const got: string[] = [];
  const servers: ServerProcess[] = [];

  beforeAll(async () => {
    db = await createTestDatabase();
    tmp = await mkdtemp(path.join(os.tmpdir(), tmpPrefix));
    receiver = createServer((req, res) => {
      got.push(String(req.headers['leoflow-notification-id']));
      req.resume();
      req.on('end', () => res.writeHead(200).end());
    });
    await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
    await writeFile(path.join(tmp, 'url'), `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/`);
    await writeFile(
      path.join(tmp, 'notify.yaml'),
      `receivers: [{ name: rx, url: { file: ${path.join(tmp, 'url')} } }]\n`,
    );
  });

  afterAll(async () => {
    for (const s of servers) await s.kill();
    await new Promise((r) => receiver?.close(r));
    await db?.drop();
    if (tmp) await rm(tmp, { recursive: true, force: true });
  });

  return async (source: (i: number, ms: number) => string, eventKind: string): Promise<DeadlineFailoverResult> => {
    const start = serverLauncher({
      databaseUrl: () => db.url,
      args: [...FLAGS, '--notify', path.join(tmp, 'notify.yaml')],
      servers,
    });
    const a = await start(['--replica-id', 'replica-a']);
    const apiA = createClients(a.url);
    await waitFor('a leads', async () => (await apiA.cluster.getLeader({})).leaderId === 'replica-a');
    const b = await start(['--replica-id', 'replica-b']);
    const api = createClients(b.url);
    for (const [i, ms] of DEADLINES_MS.entries())
      await api.workflow.applyDag({ source: source(i, ms), filename: `late${i}.yaml` });
    const triggered = Date.now();
    const runIds: string[] = [];
    for (const i of DEADLINES_MS.keys()) runIds.push((await api.workflow.triggerRun({ dagId: `late${i}` })).run!.runId);
    await new Promise((r) => setTimeout(r, Math.max(0, triggered + KILL_AT_MS - Date.now())));
    await a.kill();
    await waitFor('b leads', async () => (await api.cluster.getLeader({})).leaderId === 'replica-b', 10_000);

    await waitFor(
      'every miss delivered',
      async () => {
        const [r] = await db.sql<{ n: number }[]>`
          select count(*)::int as n from notifications where state = 'delivered'`;
        return r!.n >= DEADLINES_MS.length;
      },
      // A post the killed leader had in flight is posted again once its 30 s lease runs out.
      50_000,
    );
    const missed = await db.sql<{ run_id: string; n: number }[]>`
      select run_id::text, count(*)::int as n from events where kind = ${eventKind}
      group by run_id order by run_id`;
    const told = await db.sql<DeadlineFailoverResult['told']>`
      select id::text, run_id::text, kind, task_id, state from notifications order by run_id`;
    return { runIds, missed, told: [...told], got, survivor: b };
  };
}
