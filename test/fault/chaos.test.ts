import { randomUUID } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TERMINAL_RUN_STATES } from '../../src/core/states.js';
import { createSql, type Sql } from '../../src/db/sql.js';
import { ChaosCluster } from '../helpers/chaos/chaos-cluster.js';
import { readDbRecord } from '../helpers/chaos/db-record.js';
import { runFaultLoop, runTriggerLoop, type FaultRecord, type HarnessKill } from '../helpers/chaos/fault-loop.js';
import { checkInvariants, summarize } from '../helpers/chaos/invariants.js';
import { ledgerTaskScript, readLedger } from '../helpers/chaos/ledger.js';
import { chaosSeed, createPrng } from '../helpers/chaos/prng.js';
import { stallReport } from '../helpers/chaos/stall-report.js';
import { watchTasks, type TaskWatch } from '../helpers/chaos/task-watch.js';
import { cli, waitFor } from '../helpers/leoflow-process.js';

/**
 * Chaos: two replicas on one Postgres of their own, three agents, runs triggered all along, and
 * random faults for a while: SIGKILL of the leader, the standby, agents and task processes,
 * SIGTERM, SIGSTOP of a replica, Postgres restarts. Every task appends to an effect ledger when it
 * starts and ends. Then the faults stop, everything is let settle, and the ledger and the
 * database are held to Leoflow's promises: every run terminal; no (run, task, try) run twice; no
 * try run that the database never recorded; no two executions of a task alive at once; no attempt
 * that succeeded recorded as failed; no replica dead by itself.
 *
 * LEOFLOW_CHAOS_SEED=N replays a schedule of faults (the seed is printed, and named in every
 * failure); LEOFLOW_CHAOS_SECONDS=N makes the faults last N seconds (default 50 in `npm test`;
 * `npm run chaos` is a 10-minute soak); LEOFLOW_CHAOS_KEEP=1 keeps its folder (ledger, DAGs,
 * every process's output) for a look afterwards.
 */

const seed = chaosSeed();
const FAULT_SECONDS = chaosSeconds();
/** Upper bounds of the phases after the faults: recoveries, then every run's end. */
const SETTLE_MS = 30_000;
const DRAIN_MS = 60_000;

const SERVER_FLAGS = [
  '--tick-interval',
  '200ms',
  '--leader-watchdog',
  '1s',
  '--heartbeat-interval',
  '500ms',
  // Well above the longest stall the faults cause on their own (a replica stopped or Postgres
  // down for 3 s, a killed process started again 3 s later, plus its start-up on a busy machine),
  // so a live attempt is never judged lost merely because a fault outlasted the threshold.
  '--heartbeat-threshold',
  '15s',
  '--kill-grace',
  '500ms',
  '--shutdown-grace',
  '3s',
  '--dispatch-workers',
  '4',
  '--dispatch-queue',
  '64',
];
const AGENT_FLAGS = ['--slots', '2', '--kill-grace', '500ms', '--shutdown-grace', '5s'];

function chaosSeconds(): number {
  const raw = process.env.LEOFLOW_CHAOS_SECONDS;
  if (raw === undefined || raw === '') return 50;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 5 || n > 86_400)
    throw new Error(`LEOFLOW_CHAOS_SECONDS must be an integer from 5 to 86400, got ${JSON.stringify(raw)}`);
  return n;
}

/**
 * Two DAGs of ledger tasks: some with retries: 0, some with retries, one failing its first try on
 * purpose, some printing nothing after their sleep (they outlive a dead supervisor's pipe).
 */
function dagFiles(script: string): Record<string, string> {
  const task = (id: string, o: { deps?: string[]; retries: number; failFirst?: boolean; quietEnd?: boolean }) =>
    [
      `  - id: ${id}`,
      '    executor: agents',
      `    command: ["sh", ${JSON.stringify(script)}]`,
      `    retries: ${o.retries}`,
      '    retry_delay: 200ms',
      ...(o.deps ? [`    depends_on: [${o.deps.join(', ')}]`] : []),
      `    env: { CHAOS_FAIL_FIRST_TRY: "${o.failFirst ? 1 : 0}", CHAOS_QUIET_END: "${o.quietEnd ? 1 : 0}" }`,
    ].join('\n');
  return {
    chaos_chain: [
      'dag_id: chaos_chain',
      'max_active_runs: 8',
      'tasks:',
      task('extract', { retries: 0, quietEnd: true }),
      task('transform', { deps: ['extract'], retries: 2 }),
      task('flaky', { deps: ['extract'], retries: 1, failFirst: true, quietEnd: true }),
      task('load', { deps: ['transform', 'flaky'], retries: 0 }),
      '',
    ].join('\n'),
    chaos_fan: [
      'dag_id: chaos_fan',
      'max_active_runs: 8',
      'tasks:',
      task('root', { retries: 1 }),
      ...[0, 1, 2, 3].map((i) => task(`w${i}`, { deps: ['root'], retries: i % 2 === 0 ? 0 : 2, quietEnd: i < 2 })),
      task('join', { deps: ['w0', 'w1', 'w2', 'w3'], retries: 0, quietEnd: true }),
      '',
    ].join('\n'),
  };
}

let dir: string;
let cluster: ChaosCluster | undefined;
let watch: TaskWatch | undefined;
let sql: Sql | undefined;
const t0Ms = Date.now();
const notes: string[] = [];
const note = (what: string) => notes.push(`t+${((Date.now() - t0Ms) / 1000).toFixed(3)}s ${what}`);

/**
 * What this build's `leoflow agent` takes, from its help: several --server addresses (each agent
 * is then given every replica, its own first, and fails over between them; else its own replica
 * only; LEOFLOW_CHAOS_AGENT_SERVERS=own|all decides instead), and --state-dir (each agent then
 * keeps one across its restarts, so a restarted agent finds its tasks again).
 */
async function agentCapabilities(): Promise<{ servers: 'own' | 'all'; stateDir: boolean }> {
  const help = (await cli(null, ['agent', '--help'])).stdout;
  const forced = process.env.LEOFLOW_CHAOS_AGENT_SERVERS;
  if (forced && forced !== 'own' && forced !== 'all')
    throw new Error(`LEOFLOW_CHAOS_AGENT_SERVERS must be own or all, got ${JSON.stringify(forced)}`);
  const servers =
    (forced as 'own' | 'all' | undefined) ?? (/--server takes several|one or more/.test(help) ? 'all' : 'own');
  return { servers, stateDir: help.includes('--state-dir') };
}

beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'leoflow-chaos-'));
  const agents = await agentCapabilities();
  console.log(
    `chaos seed ${seed}, ${FAULT_SECONDS} s of faults, agents given ${agents.servers === 'all' ? 'every replica' : 'their own replica only'}${agents.stateDir ? ' and a state directory each' : ''}, in ${dir} (replay: LEOFLOW_CHAOS_SEED=${seed})`,
  );
  cluster = await ChaosCluster.start({
    dir,
    logDir: path.join(dir, 'logs'),
    marker: randomUUID(),
    replicas: 2,
    agents: 3,
    serverFlags: SERVER_FLAGS,
    agentFlags: AGENT_FLAGS,
    agentServers: agents.servers,
    agentStateDir: agents.stateDir,
    note,
  });
}, 90_000);

afterAll(async () => {
  // The timeline is printed with the checks; a test that failed before them prints it here.
  if (notes.length > 0) console.log(`timeline (seed ${seed}):\n${notes.join('\n')}`);
  watch?.stop();
  await sql?.end({ timeout: 1 }).catch(() => {});
  const closed = await cluster?.close();
  if (closed && closed.swept.length > 0)
    console.log(`processes of the test still alive at the end, killed:\n${closed.swept.join('\n')}`);
  // LEOFLOW_CHAOS_KEEP=1 keeps the folder: the ledger, the DAGs and every process's output.
  if (dir && process.env.LEOFLOW_CHAOS_KEEP !== '1') await rm(dir, { recursive: true, force: true });
}, 60_000);

describe('chaos', () => {
  it(
    `keeps every promise under random faults (seed ${seed})`,
    async () => {
      const c = cluster!;
      const ledgerPath = path.join(dir, 'ledger.log');
      const scriptPath = path.join(dir, 'ledger-task.sh');
      await writeFile(scriptPath, ledgerTaskScript(ledgerPath));
      const dags = dagFiles(scriptPath);
      for (const [id, yaml] of Object.entries(dags)) {
        const file = path.join(dir, `${id}.yaml`);
        await writeFile(file, yaml);
        // Applying is idempotent; a busy machine can push its parse past the server's time limit.
        let r = await cli(c.urlOf(c.replicas[0]!), ['dag', 'apply', file]);
        for (let i = 0; i < 3 && r.code !== 0 && /took longer than/.test(r.stderr); i++)
          r = await cli(c.urlOf(c.replicas[0]!), ['dag', 'apply', file]);
        expect(r.code, r.stderr).toBe(0);
      }
      await waitFor('every agent connected', async () => {
        const { agents } = await c.clientsOf(c.replicas[0]!).cluster.listAgents({});
        return agents.filter((a) => a.connected).length === c.agents.length;
      });

      // Faults and triggers, each from its own stream of the seed.
      const prng = createPrng(seed);
      watch = watchTasks({ ledgerPath, scriptPath });
      const faults: FaultRecord[] = [];
      const kills: HarnessKill[] = [];
      const untilMs = Date.now() + FAULT_SECONDS * 1000;
      const [triggers] = await Promise.all([
        runTriggerLoop({ cluster: c, prng: prng.fork('triggers'), dagIds: Object.keys(dags), untilMs }),
        runFaultLoop({ cluster: c, watch, prng: prng.fork('faults'), untilMs, faults, kills, note }),
      ]);
      note(`faults over; triggers: ${triggers.ok} accepted, ${triggers.failed} failed`);

      // Settle: every process back, then every run's end (bounded), then the last task processes gone.
      const notBack = await c.settle(SETTLE_MS);
      if (notBack.length > 0) note(`not back ${SETTLE_MS} ms after the faults: ${notBack.join(', ')}`);
      sql = createSql(c.pg.url, { max: 2, applicationName: 'leoflow-chaos-test' });
      const terminal = TERMINAL_RUN_STATES as readonly string[];
      const drained = await waitFor(
        'every run terminal',
        async () => {
          const rows = await sql!<{ state: string }[]>`select state from dag_runs`.catch(() => null);
          return rows !== null && rows.every((r) => terminal.includes(r.state));
        },
        DRAIN_MS,
        250,
      ).catch(() => false);
      note(drained ? 'every run terminal' : `runs still not terminal after ${DRAIN_MS} ms`);
      const stall = drained ? '' : await stallReport(sql, c);
      await waitFor(
        'no task process running',
        async () => (watch!.poll(), watch!.live().length === 0),
        10_000,
        100,
      ).catch(() =>
        note(
          `task processes still running: ${watch!
            .live()
            .map((t) => t.key)
            .join(', ')}`,
        ),
      );
      watch.poll();
      watch.stop();

      const ledger = await readLedger(ledgerPath);
      const evidence = {
        seed,
        t0Ms,
        ledger,
        lastSeen: watch.lastSeen(),
        kills,
        db: await readDbRecord(sql),
        faults,
        unexpectedExits: c.unexpectedExits,
      };
      const results = checkInvariants(evidence);
      console.log(
        [
          `chaos summary\n${summarize(evidence)}`,
          `triggers: ${triggers.ok} accepted, ${triggers.failed} failed`,
          ...(ledger.malformed.length > 0
            ? [`malformed ledger lines (a harness problem, not Leoflow's):\n${ledger.malformed.join('\n')}`]
            : []),
          ...results.map(
            (r) =>
              `${r.violations.length === 0 ? 'ok  ' : 'FAIL'} ${r.name}${r.violations.length > 0 ? ` (${r.violations.length})` : ''}`,
          ),
          `timeline:\n${notes.splice(0).join('\n')}`,
        ].join('\n'),
      );
      if (stall) console.log(`the cluster when the drain gave up:\n${stall}`);
      for (const r of results) {
        const shown = [
          ...r.violations.slice(0, 20),
          ...(r.name === 'every run terminal' && stall ? [`the cluster when the drain gave up:\n${stall}`] : []),
        ].join('\n');
        const more = r.violations.length > 20 ? `\n… and ${r.violations.length - 20} more` : '';
        if (r.violations.length > 0) console.log(`${r.name}: ${r.violations.length} violation(s)\n${shown}${more}`);
        expect
          .soft(
            r.violations.length,
            `${r.name} (seed ${seed}; replay with LEOFLOW_CHAOS_SEED=${seed}):\n${shown}${more}`,
          )
          .toBe(0);
      }
    },
    // The phases' own bounds, and room for a start-up or a check that a busy machine slows down.
    FAULT_SECONDS * 1000 + SETTLE_MS + DRAIN_MS + 90_000,
  );
});
