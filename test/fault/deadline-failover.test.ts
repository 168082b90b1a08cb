import { createServer, type Server } from 'node:http';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import { serverLauncher, waitFor, type ServerProcess } from '../helpers/leoflow-process.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';

/**
 * Issue 41: a deadline is missed once, whatever leader changes happen. Two replicas share a
 * database and a --notify file; five runs whose deadlines fall around the moment the leader is
 * SIGKILLed all miss them (their task sleeps past). Each gets exactly one run.deadline_missed
 * event and one notification, delivered to a receiver on loopback, whichever replica marked it.
 */

const FLAGS = ['--leader-watchdog', '1000ms', '--tick-interval', '200ms'];
/** The deadlines, ms from the trigger; the leader dies at KILL_AT_MS, among them. */
const DEADLINES_MS = [2200, 2600, 3000, 3400, 3800];
const KILL_AT_MS = 3000;

let db: TestDatabase;
let tmp: string;
let receiver: Server;
const got: string[] = [];
const servers: ServerProcess[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  tmp = await mkdtemp(path.join(os.tmpdir(), 'leoflow-deadline-failover-'));
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

describe('deadlines across a leader SIGKILL', () => {
  it('each missed deadline is one event and one delivered notification', async () => {
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
    for (const [i, ms] of DEADLINES_MS.entries()) {
      await api.workflow.applyDag({
        source: `dag_id: late${i}\ndeadline: ${ms}ms\nnotify: [{ on: [deadline_missed], to: rx }]\ntasks: [{ id: slow, command: ["sleep", "6"] }]\n`,
        filename: `late${i}.yaml`,
      });
    }
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
      select run_id::text, count(*)::int as n from events where kind = 'run.deadline_missed'
      group by run_id order by run_id`;
    expect(missed).toEqual(runIds.map((id) => ({ run_id: id, n: 1 })));
    const told = await db.sql<{ id: string; run_id: string; kind: string; state: string }[]>`
      select id::text, run_id::text, kind, state from notifications order by run_id`;
    expect(told.map((t) => [t.run_id, t.kind, t.state])).toEqual(
      runIds.map((id) => [id, 'deadline_missed', 'delivered']),
    );
    // Each reached the receiver; a second post of one (its replica killed mid-post) would carry its id.
    expect(new Set(got)).toEqual(new Set(told.map((t) => t.id)));
    expect(b.child.exitCode).toBeNull();
  }, 90_000);
});
