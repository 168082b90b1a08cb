import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import { TERMINAL_RUN_STATES, TERMINAL_TI_STATES } from '../../src/core/states.js';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../../src/db/embedded-postgres.js';
import { createSql } from '../../src/db/sql.js';
import { freePort } from '../helpers/global-setup.js';
import { serverLauncher, type ServerProcess } from '../helpers/leoflow-process.js';

/**
 * "The scheduler never dies", whatever the database driver does: a replica under continuous load
 * while its Postgres is restarted again and again. Each restart drops every connection of every
 * pool at once, in the middle of transactions, reserved connections and buffered writes (where
 * postgres.js 3.4.9 threw from a timer and ended the process). The replica must live through all
 * of them and finish every run it accepted. Like db-outage.test.ts, this runs on a Postgres of its
 * own, whatever TEST_DATABASE_URL says.
 */

const RESTARTS = 20;
/** Up this long under load between two restarts, then down this long. */
const UP_MS = 1000;
const DOWN_MS = 200;
/** A trigger every this often while the restarts go on. */
const TRIGGER_EVERY_MS = 100;
/**
 * After the last restart every accepted run ends, and the replica is never stuck on the way: some
 * task ends in every window this long (above the 15 s heartbeat threshold, after which an attempt
 * whose end was lost is reaped). How fast the backlog drains is the machine's (a loaded CI runner
 * took over 30 s for 280 runs), so the whole drain is only bounded by `DRAIN_MS`.
 */
const STALL_MS = 25_000;
const DRAIN_MS = 120_000;
/** The whole test, restarts and drain included. */
const BUDGET_MS = 200_000;
// The heartbeat threshold is well above an outage, so no live task is reaped for one.
const FLAGS = [
  '--tick-interval',
  '200ms',
  '--heartbeat-interval',
  '500ms',
  '--heartbeat-threshold',
  '15s',
  '--leader-watchdog',
  '1s',
];
const DAG = [
  'dag_id: load',
  'max_active_runs: 1000',
  'tasks:',
  '  - id: root',
  '    command: ["true"]',
  ...['a', 'b', 'c'].flatMap((id) => [`  - id: ${id}`, '    command: ["true"]', '    depends_on: [root]']),
  '',
].join('\n');

const logger = pino({ level: 'warn' });
let stateDir: string;
let port: number;
let pg: EmbeddedPostgres | undefined;
/** The test's own reads (postgres.js reconnects after each restart). */
const servers: ServerProcess[] = [];

beforeAll(async () => {
  stateDir = await mkdtemp(path.join(os.tmpdir(), 'leoflow-fault-restarts-'));
  port = await freePort();
  pg = await startEmbeddedPostgres({ stateDir, port, logger });
});

afterAll(async () => {
  for (const s of servers.splice(0)) await s.kill();
  await pg?.stop();
  if (stateDir) await rm(stateDir, { recursive: true, force: true });
});

const start = serverLauncher({ databaseUrl: () => pg!.url, servers });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Why the server is gone, with what it said last, or null while it lives. */
function exitOf(s: ServerProcess): string | null {
  if (s.child.exitCode === null && s.child.signalCode === null) return null;
  return `exit code ${s.child.exitCode}, signal ${s.child.signalCode}\n${s.stderr().slice(-2000)}`;
}

describe('Postgres restarted under load', () => {
  it(
    `${RESTARTS} restarts under load: the replica never exits, and every run it accepted ends`,
    async () => {
      const began = Date.now();
      const s = await start(FLAGS);
      const api = createClients(s.url);
      await api.workflow.applyDag({ source: DAG, filename: 'load.yaml' });

      // The load: a run triggered every 100 ms. While Postgres is down a trigger fails, as it would
      // for any client, and the loop goes on; only the runs the server accepted are counted.
      const runIds: string[] = [];
      let refused = 0;
      let loading = true;
      const load = (async () => {
        while (loading) {
          try {
            runIds.push((await api.workflow.triggerRun({ dagId: 'load' }, { timeoutMs: 5000 })).run!.runId);
          } catch {
            refused++;
          }
          await sleep(TRIGGER_EVERY_MS);
        }
      })();

      try {
        for (let i = 1; i <= RESTARTS; i++) {
          await sleep(UP_MS);
          await pg!.stop();
          await sleep(DOWN_MS);
          pg = await startEmbeddedPostgres({ stateDir, port, logger });
          expect(exitOf(s), `the replica after restart ${i}`).toBeNull();
        }
      } finally {
        loading = false;
        await load;
      }
      expect(runIds.length, `runs accepted (${refused} triggers refused while Postgres was down)`).toBeGreaterThan(
        RESTARTS,
      );

      // Every run it accepted ends, with the database up again.
      const sql = createSql(pg!.url, { max: 1, applicationName: 'leoflow-restarts-test' });
      try {
        const open = async () =>
          sql<
            { id: string; state: string }[]
          >`select id, state from dag_runs where not (state = any(${[...TERMINAL_RUN_STATES]}))`;
        const ended = async () =>
          (
            await sql<{ n: number }[]>`
              select count(*)::int as n from task_instances where state = any(${[...TERMINAL_TI_STATES]})`
          )[0]!.n;
        const drainFrom = Date.now();
        let left = await open();
        let progress = { n: await ended(), at: Date.now() };
        let stalled = false;
        for (const until = Date.now() + DRAIN_MS; left.length > 0 && Date.now() < until;) {
          await sleep(250);
          left = await open();
          const n = await ended();
          if (n > progress.n) progress = { n, at: Date.now() };
          else if (Date.now() - progress.at > STALL_MS) {
            stalled = true;
            break;
          }
        }
        const drainMs = Date.now() - drainFrom;
        console.log('pg-restarts', JSON.stringify({ accepted: runIds.length, refused, open: left.length, drainMs }));
        if (left.length > 0) {
          // What holds them: their tasks by state, and what the replica logged at warn and above.
          const tasks = await sql<{ state: string; n: number }[]>`
            select state, count(*)::int as n from task_instances
            where run_id = any(${left.map((r) => r.id)}) group by state`;
          const warnings = s.logs.filter((l) => Number(l.level) >= 40).slice(-40);
          console.log("pg-restarts: the open runs' tasks", JSON.stringify(tasks));
          console.log("pg-restarts: the replica's warnings", JSON.stringify(warnings), s.stderr().slice(-3000));
        }
        expect(
          left.map((r) => `${r.id} ${r.state}`),
          stalled
            ? `no task ended for ${STALL_MS} ms, ${drainMs} ms after the last restart`
            : `runs not ended ${DRAIN_MS} ms after the last restart`,
        ).toEqual([]);
      } finally {
        await sql.end({ timeout: 1 });
      }
      expect(exitOf(s), 'the replica at the end').toBeNull();
      expect(Date.now() - began).toBeLessThan(BUDGET_MS);
    },
    BUDGET_MS + 30_000,
  );
});
