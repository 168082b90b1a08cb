import { TERMINAL_RUN_STATES } from '../../../src/core/states.js';
import type { UnexpectedExit } from './chaos-cluster.js';
import type { DbRecord, DbTi } from './db-record.js';
import type { FaultRecord, HarnessKill } from './fault-loop.js';
import { attemptKey, executionKey, type Execution, type Ledger } from './ledger.js';

/**
 * The promises a chaos run is judged by, each checked against the effect ledger (what ran) and
 * the database (what Leoflow recorded). Every check only reports what the evidence proves: an
 * overlap needs both processes seen alive at one instant, a success needs the task's own end line.
 * Each violation names the rows, the task instance's recorded history and the faults just before.
 */

export interface ChaosEvidence {
  seed: number;
  /** Real-time clock at the start of the test, for times printed as t+seconds. */
  t0Ms: number;
  ledger: Ledger;
  /** When each execution that wrote no end line was last seen alive (µs). */
  lastSeen: ReadonlyMap<string, number>;
  kills: HarnessKill[];
  db: DbRecord;
  faults: FaultRecord[];
  unexpectedExits: UnexpectedExit[];
}

export interface InvariantResult {
  name: string;
  violations: string[];
}

/** How far back the faults listed with a violation go. */
const FAULT_WINDOW_MS = 15_000;

export function checkInvariants(ev: ChaosEvidence): InvariantResult[] {
  const fmt = formatter(ev);
  return [
    { name: 'every run terminal', violations: runsNotTerminal(ev) },
    { name: 'no (run, task, try) in the ledger twice', violations: duplicateAttempts(ev, fmt) },
    { name: 'no try in the ledger that the database never recorded', violations: unrecordedTries(ev, fmt) },
    { name: 'no two executions of a task overlapping in time', violations: overlaps(ev, fmt) },
    { name: 'no attempt that succeeded recorded as failed', violations: successRecordedAsFailed(ev, fmt) },
    { name: 'no replica exited by itself (the scheduler never dies)', violations: replicaExits(ev, fmt) },
  ];
}

interface Formatter {
  at(ms: number): string;
  exec(e: Execution): string;
  context(ti: DbTi | undefined, fromMs: number, toMs: number): string;
}

function formatter(ev: ChaosEvidence): Formatter {
  const at = (ms: number) => `t+${((ms - ev.t0Ms) / 1000).toFixed(3)}s`;
  const killed = new Set(ev.kills.map((k) => k.key));
  return {
    at,
    exec(e) {
      const start = e.startUs === null ? '(no start line)' : at(e.startUs / 1000);
      const seen = ev.lastSeen.get(executionKey(e));
      const end =
        e.endKind !== null
          ? `${at(e.endUs! / 1000)} ${e.endKind} exit ${e.exit}`
          : `no end line${seen !== undefined ? `, last seen alive ${at(seen / 1000)}` : ''}`;
      return `try ${e.try} pid ${e.pid}: ${start} .. ${end}${killed.has(executionKey(e)) ? ' [SIGKILLed by the harness]' : ''}`;
    },
    context(ti, fromMs, toMs) {
      const faults = ev.faults.filter(
        (f) => f.target !== '-' && f.atMs >= fromMs - FAULT_WINDOW_MS && f.atMs <= toMs + 1000,
      );
      return [
        `    database: ${ti ? `TI ${ti.id} now ${ti.state}#${ti.tryNumber}; ${ti.history.map((h) => `${h.move} ${at(h.atMs)}`).join(' → ')}` : 'no such task instance'}`,
        `    faults from ${FAULT_WINDOW_MS / 1000} s before: ${faults.length === 0 ? 'none' : faults.map((f) => `${at(f.atMs)} ${f.kind} ${f.target} (${f.detail})`).join('; ')}`,
      ].join('\n');
    },
  };
}

const startMs = (e: Execution) => (e.startUs ?? e.endUs ?? 0) / 1000;
/** A time the execution was certainly alive, as late as the evidence allows. */
function aliveUntilUs(e: Execution, lastSeen: ReadonlyMap<string, number>): number {
  if (e.endUs !== null) return e.endUs;
  return Math.max(e.startUs ?? 0, lastSeen.get(executionKey(e)) ?? 0);
}

function groupBy<T>(items: T[], key: (t: T) => string): Map<string, T[]> {
  const m = new Map<string, T[]>();
  for (const i of items) {
    const k = key(i);
    const list = m.get(k);
    if (list) list.push(i);
    else m.set(k, [i]);
  }
  return m;
}

function runsNotTerminal(ev: ChaosEvidence): string[] {
  const terminal = TERMINAL_RUN_STATES as readonly string[];
  return ev.db.runs
    .filter((r) => !terminal.includes(r.state))
    .map((r) => {
      const tis = [...ev.db.tis.values()]
        .filter((t) => t.run === r.id)
        .map((t) => `${t.task} ${t.state}#${t.tryNumber}`);
      return `run ${r.id} (${r.dagId}) is ${r.state}: ${tis.join(', ')}`;
    });
}

function duplicateAttempts(ev: ChaosEvidence, fmt: Formatter): string[] {
  const out: string[] = [];
  for (const [key, execs] of groupBy(ev.ledger.executions, attemptKey)) {
    if (execs.length < 2) continue;
    const e0 = execs[0]!;
    const to = Math.max(...execs.map((e) => aliveUntilUs(e, ev.lastSeen) / 1000));
    out.push(
      [
        `${key} (run/task/try) ran in ${execs.length} processes:`,
        ...execs.map((e) => `    ${fmt.exec(e)}`),
        fmt.context(ev.db.tis.get(`${e0.run}/${e0.task}`), Math.min(...execs.map(startMs)), to),
      ].join('\n'),
    );
  }
  return out;
}

function unrecordedTries(ev: ChaosEvidence, fmt: Formatter): string[] {
  const out: string[] = [];
  for (const [key, execs] of groupBy(ev.ledger.executions, attemptKey)) {
    const e0 = execs[0]!;
    const ti = ev.db.tis.get(`${e0.run}/${e0.task}`);
    if ((ti?.tries.get(e0.try)?.claims ?? 0) > 0) continue;
    const known = ti ? [...ti.tries.keys()].join(', ') || 'none' : 'no such task instance';
    out.push(
      [
        `${key} (run/task/try) ran, but the database never claimed that try (its tries: ${known}):`,
        ...execs.map((e) => `    ${fmt.exec(e)}`),
        fmt.context(ti, startMs(e0), aliveUntilUs(e0, ev.lastSeen) / 1000),
      ].join('\n'),
    );
  }
  return out;
}

function overlaps(ev: ChaosEvidence, fmt: Formatter): string[] {
  const out: string[] = [];
  for (const [task, execs] of groupBy(ev.ledger.executions, (e) => `${e.run}/${e.task}`)) {
    const sorted = [...execs].sort((a, b) => startMs(a) - startMs(b));
    for (let i = 0; i < sorted.length; i++) {
      const a = sorted[i]!;
      const aliveUntil = aliveUntilUs(a, ev.lastSeen);
      for (let j = i + 1; j < sorted.length; j++) {
        const b = sorted[j]!;
        if (b.startUs === null || b.startUs >= aliveUntil) continue;
        out.push(
          [
            `${task} (run/task): two executions alive together for at least ${((aliveUntil - b.startUs) / 1000).toFixed(0)} ms:`,
            `    ${fmt.exec(a)}`,
            `    ${fmt.exec(b)}`,
            fmt.context(ev.db.tis.get(task), startMs(a), aliveUntil / 1000),
          ].join('\n'),
        );
      }
    }
  }
  return out;
}

/** How long after a task's end its agent may still hold its unreported end (a wipe then loses it). */
const WIPE_REPORT_WINDOW_MS = 5000;

function successRecordedAsFailed(ev: ChaosEvidence, fmt: Formatter): string[] {
  const killed = new Set(ev.kills.map((k) => k.key));
  const out: string[] = [];
  for (const e of ev.ledger.executions) {
    // A process the harness SIGKILLed may have died between its end line and its exit.
    if (e.endKind !== 'end' || e.exit !== 0 || killed.has(executionKey(e))) continue;
    const ti = ev.db.tis.get(`${e.run}/${e.task}`);
    const t = ti?.tries.get(e.try);
    if (t?.outcome !== 'failed' && t?.outcome !== 'up_for_retry') continue;
    // Its agent was SIGKILLed and its state directory emptied after the task started: an end it
    // had not yet reported went with the folder that held it, so a loss is what the agent can say.
    const wiped = ev.faults.some(
      (f) =>
        f.kind === 'wipe-agent' &&
        t.agents.includes(f.target) &&
        startMs(e) <= f.atMs &&
        f.atMs <= e.endUs! / 1000 + WIPE_REPORT_WINDOW_MS,
    );
    if (wiped) continue;
    out.push(
      [
        `${attemptKey(e)} (run/task/try) exited 0, recorded ${t.outcome}${t.reason ? ` (${t.reason})` : ''}:`,
        `    ${fmt.exec(e)}`,
        fmt.context(ti, startMs(e), e.endUs! / 1000),
      ].join('\n'),
    );
  }
  return out;
}

function replicaExits(ev: ChaosEvidence, fmt: Formatter): string[] {
  return ev.unexpectedExits
    .filter((x) => x.kind === 'replica')
    .map(
      (x) =>
        `${x.member} exited at ${fmt.at(x.atMs)} (code ${x.code}, signal ${x.signal}), last words:\n${x.tail.replace(/^/gm, '    ')}`,
    );
}

/** A few lines of numbers about the run, for the test's output. */
export function summarize(ev: ChaosEvidence): string {
  const count = <T>(items: T[], key: (t: T) => string) =>
    [...groupBy(items, key)].map(([k, v]) => `${k} ${v.length}`).join(', ');
  const tries = [...ev.db.tis.values()].flatMap((t) => [...t.tries.values()]);
  // What the ledger says of each attempt the reaper declared lost.
  const byAttempt = groupBy(ev.ledger.executions, attemptKey);
  const lostFates = [...ev.db.tis.values()].flatMap((ti) =>
    [...ti.tries.values()]
      .filter((t) => t.reason === 'agent_lost')
      .map((t) => {
        const execs = byAttempt.get(attemptKey({ run: ti.run, task: ti.task, try: t.try })) ?? [];
        if (execs.length === 0) return 'never started';
        if (execs.some((e) => e.endKind === 'end' && e.exit === 0)) return 'exited 0';
        if (execs.some((e) => e.endKind !== null)) return 'ended otherwise';
        return 'died without an end line';
      }),
  );
  return [
    `seed ${ev.seed}; t+0 is ${new Date(ev.t0Ms).toISOString()}`,
    `runs: ${ev.db.runs.length} (${count(ev.db.runs, (r) => r.state)})`,
    `attempts in the database: ${tries.length} (claimed more than once: ${tries.filter((t) => t.claims > 1).length}; declared lost: ${lostFates.length}${lostFates.length > 0 ? `, of which in the ledger: ${count(lostFates, (f) => f)}` : ''})`,
    `executions in the ledger: ${ev.ledger.executions.length} (${ev.ledger.lines.length} lines, ${ev.ledger.malformed.length} malformed)`,
    `faults: ${ev.faults.length} (${count(ev.faults, (f) => (f.target === '-' ? `${f.kind} skipped` : f.kind))})`,
    `task processes SIGKILLed by the harness: ${ev.kills.length}`,
    `processes that exited by themselves: ${ev.unexpectedExits.length === 0 ? 'none' : ev.unexpectedExits.map((x) => `${x.member} (code ${x.code}, signal ${x.signal})`).join(', ')}`,
  ].join('\n');
}
