import type { ChaosCluster, Member } from './chaos-cluster.js';
import type { Prng } from './prng.js';
import type { TaskWatch } from './task-watch.js';

/**
 * The faults of the chaos test, drawn from a seeded generator until a deadline: SIGKILL of the
 * leader, of the standby, of an agent and of a task process; SIGKILL of an agent restarted with
 * its state directory emptied; SIGTERM of a replica or an agent;
 * SIGSTOP of a replica for a few seconds; a Postgres restart (fast or immediate). What was killed
 * comes back after a short delay. The fault model is one replica impaired at a time (a fault on
 * a replica waits for the other to be up): a cluster of two promises to ride out the loss of one.
 * Agents, tasks and Postgres are hit whatever else is down.
 */

export const FAULT_WEIGHTS = {
  'kill-leader': 3,
  'kill-standby': 2,
  'term-replica': 1,
  'stop-replica': 2,
  'kill-agent': 3,
  'wipe-agent': 2,
  'term-agent': 1,
  'kill-task': 4,
  'restart-postgres': 2,
} as const;

export type FaultKind = keyof typeof FAULT_WEIGHTS;

export interface FaultRecord {
  atMs: number;
  kind: FaultKind;
  /** What was hit, or '-' when the fault had no target at that moment (skipped). */
  target: string;
  detail: string;
}

/** A task process the harness SIGKILLed: its outcome may legitimately be a failure. */
export interface HarnessKill {
  pid: number;
  /** The execution key (run/task/try#pid) of the process. */
  key: string;
  atUs: number;
}

export interface FaultLoopOptions {
  cluster: ChaosCluster;
  watch: TaskWatch;
  prng: Prng;
  untilMs: number;
  faults: FaultRecord[];
  kills: HarnessKill[];
  /** Milliseconds between faults. */
  gapMs?: [number, number];
  /** How long a killed process stays down. */
  downMs?: [number, number];
  /** How long a replica stays stopped. */
  frozenMs?: [number, number];
  /** How long Postgres stays down. */
  pgDownMs?: [number, number];
  note(what: string): void;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function runFaultLoop(o: FaultLoopOptions): Promise<void> {
  const gap = o.gapMs ?? [800, 3000];
  const down = o.downMs ?? [300, 3000];
  const frozen = o.frozenMs ?? [1000, 3000];
  const pgDown = o.pgDownMs ?? [500, 3000];
  const { cluster, prng } = o;
  const between = (r: [number, number]) => prng.int(r[0], r[1]);
  /** Replicas that may be hit now: up, idle, and the other replicas all up and idle too. */
  const hittable = () =>
    cluster.replicas.filter(
      (r) => r.status === 'up' && !r.busy && cluster.replicas.every((x) => x === r || (x.status === 'up' && !x.busy)),
    );
  const idleAgents = () => cluster.agents.filter((a) => a.status === 'up' && !a.busy);

  while (Date.now() + gap[0] < o.untilMs) {
    await sleep(between(gap));
    if (Date.now() >= o.untilMs) break;
    const kind = prng.weighted(FAULT_WEIGHTS);
    // Every draw of a fault's parameters happens whether or not it finds a target, so the
    // schedule a seed replays shifts as little as possible with what is up at the moment.
    const delay = between(down);
    const freezeMs = between(frozen);
    const pgDownMs = between(pgDown);
    const pgMode = prng.pick(['fast', 'immediate'] as const);
    const choice = prng.next();
    const pickOf = <T>(items: T[]): T | undefined =>
      items.length === 0 ? undefined : items[Math.floor(choice * items.length)];

    const record = (target: string, detail: string) => {
      const f = { atMs: Date.now(), kind, target, detail };
      o.faults.push(f);
      o.note(`fault ${kind} ${target} ${detail}`);
    };
    const onReplica = async (
      pick: (candidates: Member[]) => Promise<Member | undefined>,
      act: (m: Member) => Promise<string> | string,
    ) => {
      const m = await pick(hittable());
      if (!m) return record('-', 'skipped: no replica may be hit now');
      record(m.name, await act(m));
    };

    switch (kind) {
      case 'kill-leader':
        await onReplica(
          async (c) => {
            const leader = await cluster.leader();
            return leader && c.includes(leader) ? leader : undefined;
          },
          (m) => cluster.kill(m, 'SIGKILL', delay),
        );
        break;
      case 'kill-standby':
        await onReplica(
          async (c) => {
            const leader = await cluster.leader();
            return leader ? pickOf(c.filter((r) => r !== leader)) : undefined;
          },
          (m) => cluster.kill(m, 'SIGKILL', delay),
        );
        break;
      case 'term-replica':
        await onReplica(
          async (c) => pickOf(c),
          (m) => cluster.kill(m, 'SIGTERM', delay),
        );
        break;
      case 'stop-replica':
        await onReplica(
          async (c) => pickOf(c),
          (m) => cluster.freeze(m, freezeMs),
        );
        break;
      case 'kill-agent':
      case 'term-agent': {
        const a = pickOf(idleAgents());
        if (!a) record('-', 'skipped: no agent up');
        else record(a.name, await cluster.kill(a, kind === 'kill-agent' ? 'SIGKILL' : 'SIGTERM', delay));
        break;
      }
      case 'wipe-agent': {
        const a = pickOf(idleAgents());
        if (!a) record('-', 'skipped: no agent up');
        else record(a.name, await cluster.killAndWipe(a, delay));
        break;
      }
      case 'kill-task': {
        // Tasks are short: wait a moment for one to be running rather than skip at once.
        for (let i = 0; i < 15 && o.watch.live().length === 0; i++) {
          await sleep(100);
          o.watch.poll();
        }
        const t = pickOf(o.watch.live());
        if (!t || !o.watch.stillAlive(t)) {
          record('-', 'skipped: no task running');
          break;
        }
        const atUs = Date.now() * 1000;
        try {
          process.kill(t.line.pid, 'SIGKILL');
          o.kills.push({ pid: t.line.pid, key: t.key, atUs });
          record(t.key, `pid ${t.line.pid}`);
        } catch {
          record('-', `skipped: ${t.key} ended first`);
        }
        break;
      }
      case 'restart-postgres':
        if (!cluster.pgUp()) record('-', 'skipped: Postgres already restarting');
        else record('postgres', cluster.restartPostgres(pgMode, pgDownMs));
        break;
    }
  }
}

/**
 * Triggers runs of `dagIds` until the deadline, every few hundred milliseconds, through a replica
 * that is up. A trigger that fails (a fault in its way) is counted and not retried: its run may
 * exist or not, and the checks read the runs from the database, not from this loop.
 */
export async function runTriggerLoop(o: {
  cluster: ChaosCluster;
  prng: Prng;
  dagIds: string[];
  untilMs: number;
  everyMs?: [number, number];
}): Promise<{ ok: number; failed: number }> {
  const every = o.everyMs ?? [400, 1500];
  const counts = { ok: 0, failed: 0 };
  while (Date.now() < o.untilMs) {
    await sleep(o.prng.int(every[0], every[1]));
    const dagId = o.prng.pick(o.dagIds);
    const up = o.cluster.replicas.filter((r) => r.status === 'up');
    const r = up.length > 0 ? up[o.prng.int(0, up.length - 1)] : undefined;
    if (!r) {
      counts.failed++;
      continue;
    }
    const ok = await o.cluster
      .clientsOf(r)
      .workflow.triggerRun({ dagId }, { timeoutMs: 3000 })
      .then(
        () => true,
        () => false,
      );
    counts[ok ? 'ok' : 'failed']++;
  }
  return counts;
}
