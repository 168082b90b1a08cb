import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { mkdir, rm } from 'node:fs/promises';
import path from 'node:path';
import pg from 'pg';
import pino from 'pino';
import { createClients, type Clients } from '../../../src/cli/client.js';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../../../src/db/embedded-postgres.js';
import { freePort } from '../global-setup.js';
import { startAgent, startServer } from '../leoflow-process.js';
import { procStat } from './task-watch.js';

/**
 * The processes of a chaos test, and what may be done to them: a Postgres of its own, control-
 * plane replicas on fixed ports (so a restarted one is found where it was) and agents, each
 * agent on one replica. Every process is started with a marker in its environment, inherited by
 * whatever it starts (task processes, supervisors), so `close()` can find and kill by pid every
 * process the test caused, orphans included. A member that exits when nobody asked it to is
 * recorded and started again.
 */

/** The environment variable every process of the test carries, with the test's own value. */
export const MARKER_VAR = 'LEOFLOW_CHAOS_MARKER';

export type MemberKind = 'replica' | 'agent';

interface Proc {
  pid: number;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Whether the process has exited. */
  gone(): boolean;
  /** The last things it said: for the report of an exit nobody asked for. */
  tail(): string;
  /** Everything it said (written to the logs folder when it exits). */
  output(): string;
}

export class Member {
  /** up: running; down: not running (a restart may be on its way); frozen: SIGSTOPped. */
  status: 'up' | 'down' | 'frozen' = 'down';
  /** A fault or a restart is under way: not a target for another fault. */
  busy = false;
  proc: Proc | null = null;
  /** Set when the harness signals it, so its exit is not counted as unexpected. */
  expectingExit = false;
  constructor(
    readonly name: string,
    readonly kind: MemberKind,
    readonly launch: () => Promise<Proc>,
  ) {}
}

export interface UnexpectedExit {
  member: string;
  kind: MemberKind;
  atMs: number;
  code: number | null;
  signal: string | null;
  tail: string;
}

export interface ChaosClusterOptions {
  dir: string;
  marker: string;
  replicas: number;
  agents: number;
  serverFlags: readonly string[];
  agentFlags: readonly string[];
  /** Whether each agent is given its own replica's address only, or every replica's (own first). */
  agentServers: 'own' | 'all';
  /** Whether to give each agent `--state-dir`, one folder kept across its restarts. */
  agentStateDir: boolean;
  /** Each process's output is written here when it exits. */
  logDir: string;
  /** A line for the test's event log. */
  note(what: string): void;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const REPLICA_NAMES = ['replica-a', 'replica-b', 'replica-c', 'replica-d'];

export class ChaosCluster {
  readonly replicas: Member[] = [];
  readonly agents: Member[] = [];
  readonly unexpectedExits: UnexpectedExit[] = [];
  /** Escalations and other things the harness had to do that were not in the plan. */
  readonly notes: string[] = [];
  #pg: EmbeddedPostgres | null = null;
  #pgBusy = false;
  #pgPort = 0;
  #closing = false;
  readonly #background = new Set<Promise<unknown>>();
  readonly #urls = new Map<Member, string>();
  readonly #clients = new Map<Member, Clients>();
  readonly #opts: ChaosClusterOptions;

  private constructor(opts: ChaosClusterOptions) {
    this.#opts = opts;
  }

  static async start(opts: ChaosClusterOptions): Promise<ChaosCluster> {
    const c = new ChaosCluster(opts);
    await mkdir(opts.logDir, { recursive: true });
    c.#pgPort = await freePort();
    c.#pg = await c.#startPostgres();
    for (let i = 0; i < opts.replicas; i++) {
      const name = REPLICA_NAMES[i]!;
      const [port, metrics] = [await freePort(), await freePort()];
      const stateDir = path.join(opts.dir, name);
      await mkdir(stateDir, { recursive: true });
      const url = `http://127.0.0.1:${port}`;
      const m = new Member(name, 'replica', async () => {
        const s = await startServer({
          env: { DATABASE_URL: c.pg.url, [MARKER_VAR]: opts.marker },
          args: [
            ...opts.serverFlags,
            '--replica-id',
            name,
            '--listen',
            `127.0.0.1:${port}`,
            '--metrics-listen',
            `127.0.0.1:${metrics}`,
            '--state-dir',
            stateDir,
          ],
          readyTimeoutMs: 30_000,
        });
        return {
          pid: s.child.pid!,
          exited: s.exited,
          gone: () => s.child.exitCode !== null || s.child.signalCode !== null,
          tail: () =>
            `${s.logs
              .slice(-4)
              .map((l) => JSON.stringify(l))
              .join('\n')}\n${s.stderr().slice(-3000)}`,
          output: () => `${s.logs.map((l) => JSON.stringify(l)).join('\n')}\n${s.stderr()}`,
        };
      });
      c.#urls.set(m, url);
      c.#clients.set(m, createClients(url));
      c.replicas.push(m);
    }
    for (const m of c.replicas) await c.#startMember(m);
    for (let i = 0; i < opts.agents; i++) {
      const name = `agent-${i + 1}`;
      // Its own working directory, kept across its restarts: whatever state an agent keeps
      // relative to where it runs is found again by the next process of the same agent.
      const cwd = path.join(opts.dir, name);
      await mkdir(cwd, { recursive: true });
      const replica = c.replicas[i % c.replicas.length]!;
      // Its own replica first; the others after it when the agent takes several addresses.
      const servers = opts.agentServers === 'all' ? [replica, ...c.replicas.filter((r) => r !== replica)] : [replica];
      const serverArg = servers.map((r) => c.#urls.get(r)!).join(',');
      const m = new Member(name, 'agent', async () => {
        const stateArgs = opts.agentStateDir ? ['--state-dir', path.join(cwd, 'state')] : [];
        const a = startAgent(serverArg, ['--id', name, ...stateArgs, ...opts.agentFlags], {
          cwd,
          env: { [MARKER_VAR]: opts.marker },
        });
        return {
          pid: a.child.pid!,
          exited: a.exited,
          gone: () => a.child.exitCode !== null || a.child.signalCode !== null,
          tail: () => a.output().slice(-3000),
          output: () => a.output(),
        };
      });
      c.agents.push(m);
      await c.#startMember(m);
    }
    return c;
  }

  get pg(): EmbeddedPostgres {
    if (!this.#pg) throw new Error('the chaos Postgres is down');
    return this.#pg;
  }

  pgUp(): boolean {
    return this.#pg !== null && !this.#pgBusy;
  }

  urlOf(m: Member): string {
    return this.#urls.get(m)!;
  }

  clientsOf(m: Member): Clients {
    return this.#clients.get(m)!;
  }

  /** The replica GetLeader names, asked of every replica that is up; null when none answers with one. */
  async leader(): Promise<Member | null> {
    for (const r of this.replicas.filter((x) => x.status === 'up')) {
      const res = await this.clientsOf(r)
        .cluster.getLeader({}, { timeoutMs: 1000 })
        .catch(() => null);
      const found = this.replicas.find((x) => x.name === res?.leaderId);
      if (found) return found;
    }
    return null;
  }

  /**
   * Sends `signal` (SIGKILL or SIGTERM) and waits for the exit (a SIGTERM that is not obeyed in
   * `termWaitMs` is followed by SIGKILL, and noted); starts the member again `restartAfterMs`
   * later, in the background.
   */
  async kill(
    m: Member,
    signal: 'SIGKILL' | 'SIGTERM',
    restartAfterMs: number,
    termWaitMs = 20_000,
    whileDown?: () => Promise<void>,
  ): Promise<string> {
    const proc = m.proc;
    if (!proc || m.busy) return 'not running';
    m.busy = true;
    m.expectingExit = true;
    const pid = proc.pid;
    try {
      process.kill(pid, signal);
    } catch {
      // gone already
    }
    const done = this.#track(
      (async () => {
        if (signal === 'SIGTERM') {
          const timedOut = await Promise.race([proc.exited.then(() => false), sleep(termWaitMs).then(() => true)]);
          if (timedOut) {
            this.#note(`${m.name} (pid ${pid}) had not exited ${termWaitMs} ms after SIGTERM: SIGKILLed`);
            try {
              process.kill(pid, 'SIGKILL');
            } catch {
              // gone meanwhile
            }
          }
        }
        await proc.exited;
        await whileDown?.();
        await sleep(restartAfterMs);
        await this.#startMember(m);
        m.busy = false;
      })(),
    );
    if (signal === 'SIGKILL') await Promise.race([proc.exited, done]);
    return `pid ${pid}, back after ${restartAfterMs} ms`;
  }

  /**
   * SIGKILL of an agent, restarted with the same id and its state directory emptied (a re-imaged
   * node, a container without a volume): it cannot re-attach to the tasks it left, and must prove
   * them dead before its Hello lets their next tries start. Without state directories (an agent
   * build that takes none) every restart is already such a one.
   */
  async killAndWipe(m: Member, restartAfterMs: number): Promise<string> {
    const stateDir = path.join(this.#opts.dir, m.name, 'state');
    const wiped = this.#opts.agentStateDir;
    const r = await this.kill(m, 'SIGKILL', restartAfterMs, undefined, async () => {
      if (!wiped) return;
      await rm(stateDir, { recursive: true, force: true });
      await mkdir(stateDir, { recursive: true });
    });
    return `${r}, its state directory ${wiped ? 'emptied' : 'not kept anyway'}`;
  }

  /** SIGSTOP, then SIGCONT `ms` later (in the background). */
  freeze(m: Member, ms: number): string {
    const proc = m.proc;
    if (!proc || m.busy) return 'not running';
    m.busy = true;
    m.status = 'frozen';
    process.kill(proc.pid, 'SIGSTOP');
    this.#track(
      (async () => {
        await sleep(ms);
        if (!proc.gone()) process.kill(proc.pid, 'SIGCONT');
        if (m.proc === proc && !proc.gone()) m.status = 'up';
        m.busy = false;
      })(),
    );
    return `pid ${proc.pid}, ${ms} ms`;
  }

  /**
   * Stops Postgres (fast: SIGINT, open transactions rolled back; immediate: SIGQUIT, a crash
   * without a checkpoint, recovered at the next start) and starts it again on the same data
   * directory and port `downMs` later, in the background.
   */
  restartPostgres(mode: 'fast' | 'immediate', downMs: number): string {
    const pg = this.#pg;
    if (!pg || this.#pgBusy) return 'not running';
    this.#pgBusy = true;
    this.#track(
      (async () => {
        if (mode === 'fast') await pg.stop();
        else await stopImmediately(pg.dataDir);
        this.#pg = null;
        await sleep(downMs);
        this.#pg = await this.#startPostgres();
        this.#pgBusy = false;
      })(),
    );
    return `${mode}, down ${downMs} ms`;
  }

  /**
   * Waits for every fault's recovery, then for every member to be up again, until the deadline.
   * Resolves what is still not back then (empty when all is well): the checks run anyway.
   */
  async settle(timeoutMs: number): Promise<string[]> {
    const deadline = Date.now() + timeoutMs;
    while (this.#background.size > 0 && Date.now() < deadline)
      await Promise.race([Promise.allSettled([...this.#background]), sleep(500)]);
    for (const m of [...this.replicas, ...this.agents]) {
      if (m.status !== 'up' && !m.busy && Date.now() < deadline) await this.#startMember(m, deadline).catch(() => {});
    }
    return [
      ...(this.#pg === null || this.#pgBusy ? ['Postgres'] : []),
      ...[...this.replicas, ...this.agents]
        .filter((m) => m.status !== 'up')
        .map((m) => `${m.name} (${m.status}${m.busy ? ', recovering' : ''})`),
    ];
  }

  /** Kills every process the test started, and every process that carries its marker; says which stragglers it found. */
  async close(): Promise<{ swept: string[] }> {
    this.#closing = true;
    for (const m of [...this.agents, ...this.replicas]) {
      const p = m.proc;
      if (!p) continue;
      m.expectingExit = true;
      for (const sig of ['SIGCONT', 'SIGKILL'] as const) {
        try {
          process.kill(p.pid, sig);
        } catch {
          // gone
        }
      }
      await p.exited;
    }
    await Promise.race([Promise.allSettled([...this.#background]), sleep(5000)]);
    const swept = sweepMarked(this.#opts.marker);
    // A process may have been starting one more while the first sweep ran.
    swept.push(...sweepMarked(this.#opts.marker));
    await this.#pg?.stop();
    this.#pg = null;
    return { swept };
  }

  #note(what: string): void {
    this.notes.push(what);
    this.#opts.note(what);
  }

  #track<T>(p: Promise<T>): Promise<T> {
    const tracked = p.catch((err: unknown) => {
      if (!this.#closing) this.#note(`harness error: ${(err as Error).stack ?? String(err)}`);
    });
    this.#background.add(tracked);
    void tracked.finally(() => this.#background.delete(tracked));
    return p;
  }

  /** Starts Postgres on its data directory and port, trying again every half second (until the cluster closes). */
  async #startPostgres(): Promise<EmbeddedPostgres> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await startEmbeddedPostgres({
          stateDir: path.join(this.#opts.dir, 'postgres'),
          port: this.#pgPort,
          logger: pino({ level: 'warn' }),
        });
      } catch (err) {
        if (this.#closing) throw err;
        this.#note(
          `Postgres did not start (attempt ${attempt}): ${(err as Error).message.split('\n').slice(0, 3).join(' | ')}`,
        );
        await sleep(500);
      }
    }
  }

  /** Starts `m`, trying again every second (a replica cannot start while Postgres is down). */
  async #startMember(m: Member, deadline = Infinity): Promise<void> {
    while (!this.#closing) {
      try {
        const proc = await m.launch();
        m.proc = proc;
        m.status = 'up';
        m.expectingExit = false;
        void proc.exited.then(({ code, signal }) => this.#exited(m, proc, code, signal));
        return;
      } catch (err) {
        const file = path.join(this.#opts.logDir, `${m.name}-start-failure-${Date.now()}.log`);
        const sessions = this.#pg && !this.#pgBusy ? await databaseSessions(this.#pg.url) : 'Postgres down';
        try {
          writeFileSync(file, `${(err as Error).message}\n\ndatabase sessions right after:\n${sessions}\n`);
        } catch {
          // the folder is gone (the test is over)
        }
        this.#opts.note(`${m.name} did not start: ${(err as Error).message.split('\n')[0]} (${path.basename(file)})`);
        if (Date.now() > deadline) throw err;
        await sleep(1000);
      }
    }
  }

  #exited(m: Member, proc: Proc, code: number | null, signal: NodeJS.Signals | null): void {
    try {
      writeFileSync(path.join(this.#opts.logDir, `${m.name}-${proc.pid}.log`), proc.output());
    } catch {
      // the folder is gone (the test is over)
    }
    if (m.proc !== proc) return;
    m.proc = null;
    m.status = 'down';
    if (m.expectingExit || this.#closing) return;
    this.unexpectedExits.push({ member: m.name, kind: m.kind, atMs: Date.now(), code, signal, tail: proc.tail() });
    this.#note(`${m.name} (pid ${proc.pid}) exited by itself: code ${code}, signal ${signal}`);
    if (m.busy) return; // a fault's recovery will start it
    m.busy = true;
    this.#track(
      (async () => {
        await sleep(1000);
        await this.#startMember(m);
        m.busy = false;
      })(),
    );
  }
}

/**
 * Every session of the database and what it waits for, read with node-postgres (not postgres.js,
 * whose crash on a server restart is one of the things under test), bounded in time.
 */
async function databaseSessions(url: string): Promise<string> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000, query_timeout: 3000 });
  try {
    await client.connect();
    const { rows } = await client.query(`
      select a.pid, a.application_name as app, a.state, a.wait_event_type as wait_type, a.wait_event as wait,
        round(extract(epoch from now() - a.state_change))::int as state_for_s, left(regexp_replace(a.query, '\\s+', ' ', 'g'), 160) as query,
        (select string_agg(l.locktype || ':' || l.mode, ',') from pg_locks l where l.pid = a.pid and not l.granted) as waits_for
      from pg_stat_activity a where a.datname = current_database() and a.pid <> pg_backend_pid() order by a.application_name, a.pid`);
    return rows.map((r) => JSON.stringify(r)).join('\n');
  } catch (err) {
    return `could not read them: ${(err as Error).message}`;
  } finally {
    await client.end().catch(() => {});
  }
}

/** SIGQUIT to the postmaster (immediate shutdown), then waits for it to be gone. */
async function stopImmediately(dataDir: string): Promise<void> {
  const pid = Number(readFileSync(path.join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
  process.kill(pid, 'SIGQUIT');
  const deadline = Date.now() + 15_000;
  while (procStat(pid) !== null && procStat(pid)!.state !== 'Z') {
    if (Date.now() > deadline) {
      process.kill(pid, 'SIGKILL');
      break;
    }
    await sleep(20);
  }
}

/** SIGKILLs, by pid, every process whose environment carries the marker; returns "pid command" of each. */
export function sweepMarked(marker: string): string[] {
  const needle = `\0${MARKER_VAR}=${marker}\0`;
  const found: string[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const pid = Number(entry);
    if (pid === process.pid) continue;
    let env: string;
    try {
      env = `\0${readFileSync(`/proc/${pid}/environ`, 'latin1')}`;
    } catch {
      continue;
    }
    if (!env.includes(needle)) continue;
    let cmd = '';
    try {
      cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ').trim();
    } catch {
      // gone
    }
    try {
      process.kill(pid, 'SIGKILL');
      found.push(`${pid} ${cmd}`);
    } catch {
      // gone meanwhile
    }
  }
  return found;
}
