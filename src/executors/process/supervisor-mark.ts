import { identify, isSameProcess, type ProcessIdentity } from './process-identity.js';
import { processesMarked } from './processes-marked.js';
import { ATTEMPT_DIR_ENV, SUPERVISOR_ENV } from './shim.js';

/**
 * An agent's mark on the shims and tasks it starts, and how a later process of the same agent id
 * finds them: by the mark in their environment (/proc/PID/environ), whatever became of the state
 * directory that named them. A restarted agent re-attaches to those whose folder it still has and
 * proves the rest dead before it says Hello, so the control plane never starts the next try of a
 * task whose earlier try still runs here. Only Linux lists processes with their environment.
 */

/** The environment entry an agent process puts on its shims: its id and its own identity. */
export function supervisorMark(agentId: string): Record<string, string> {
  const me = identify(process.pid) ?? { pid: process.pid, startTicks: null, bootId: null };
  return { [SUPERVISOR_ENV]: `${agentId} ${me.pid} ${me.startTicks ?? '-'}` };
}

/** A process carrying an agent's mark. */
export interface MarkedProcess {
  pid: number;
  group: number;
  /** Its attempt's folder (LEOFLOW_ATTEMPT_DIR), when it carries one. */
  attemptDir: string | null;
  /** The agent process that started it. */
  supervisor: ProcessIdentity;
}

/** Every process (other than this process's group) whose mark names `agentId`. */
export function findMarkedBy(agentId: string): MarkedProcess[] {
  const prefix = `${SUPERVISOR_ENV}=${agentId} `;
  return processesMarked(prefix).map(({ pid, group, mark, environ }) => {
    const [supPid, ticks] = mark.slice(prefix.length).split(' ');
    const dir = environ.find((e) => e.startsWith(`${ATTEMPT_DIR_ENV}=`));
    return {
      pid,
      group,
      attemptDir: dir === undefined ? null : dir.slice(ATTEMPT_DIR_ENV.length + 1),
      // The boot is this one: a process that runs now was started since it.
      supervisor: {
        pid: Number(supPid),
        startTicks: ticks === undefined || ticks === '-' ? null : ticks,
        bootId: null,
      },
    };
  });
}

/** What `killOrphansOfAgent` found and killed. */
export interface AgentOrphans {
  /** Process groups killed and proved gone. */
  killed: number;
  /** Marked processes left alone: a live process of this agent id supervises them. */
  ofLiveSupervisor: number;
}

/**
 * Kills, and proves gone, every process group that an earlier process of agent `agentId` left
 * and that is not about to be re-attached (`keep`: the attempt folders this process holds;
 * `keepGroups`: the process groups their live shims lead).
 * Groups whose supervising process still runs are left alone (another live process under the
 * same id: the control plane refuses its second stream). Throws when a group outlives `waitMs`
 * after SIGKILL: the agent must not say Hello while a task it could not stop still runs.
 */
export async function killOrphansOfAgent(
  agentId: string,
  keep: ReadonlySet<string>,
  keepGroups: ReadonlySet<number> = new Set(),
  waitMs = 10_000,
): Promise<AgentOrphans> {
  const marked = findMarkedBy(agentId);
  const orphans = marked.filter(
    (p) => !isSameProcess(p.supervisor) && !(p.attemptDir !== null && keep.has(p.attemptDir)),
  );
  const kept = new Set(orphans.map((o) => o.group));
  // A group with one process to keep (its folder is held) is kept whole: it is one attempt. So is
  // the group a held folder's live shim leads, whatever its task did to its environment.
  for (const p of marked) if (p.attemptDir !== null && keep.has(p.attemptDir)) kept.delete(p.group);
  for (const group of keepGroups) kept.delete(group);
  const groups = [...kept];
  for (const group of groups) {
    try {
      process.kill(-group, 'SIGKILL');
    } catch {
      // ESRCH: gone meanwhile.
    }
  }
  const deadline = Date.now() + waitMs;
  for (;;) {
    const left = findMarkedBy(agentId).filter((p) => kept.has(p.group));
    if (left.length === 0) break;
    if (Date.now() > deadline) {
      throw new Error(
        `processes ${left.map((p) => p.pid).join(', ')} left by an earlier process of agent ${agentId} ` +
          `survived SIGKILL for ${waitMs} ms: not connecting while they may still run`,
      );
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  return { killed: groups.length, ofLiveSupervisor: marked.filter((p) => isSameProcess(p.supervisor)).length };
}
