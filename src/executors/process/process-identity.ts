import { readFileSync } from 'node:fs';

/**
 * Which process a pid named when it was recorded. A pid alone is not an identity: after a crash
 * and a reboot, or simply much later, the same number may name another process, which must never
 * be adopted or killed in the attempt's name. Linux gives each process a start time (in clock
 * ticks since boot) and each boot an id; together with the pid they name one process for good.
 * Elsewhere both are null and the pid is taken on trust.
 */
export interface ProcessIdentity {
  pid: number;
  startTicks: string | null;
  bootId: string | null;
}

/** The fields of /proc/<pid>/stat after the command name, which may itself hold spaces. */
function statFields(pid: number): string[] | null {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return null;
  }
  return text.slice(text.lastIndexOf(')') + 2).split(' ');
}

let bootId: string | null | undefined;
function currentBootId(): string | null {
  if (bootId === undefined) {
    try {
      bootId = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
    } catch {
      bootId = null;
    }
  }
  return bootId;
}

/** Field 22 of stat (starttime) is index 19 after the name; field 5 (pgrp) is index 2. */
const START_TIME = 19;
const PROCESS_GROUP = 2;

/** The identity of a live process now, or null when it is gone. */
export function identify(pid: number): ProcessIdentity | null {
  const fields = statFields(pid);
  if (fields === null) return isAlive(pid) ? { pid, startTicks: null, bootId: null } : null;
  return { pid, startTicks: fields[START_TIME] ?? null, bootId: currentBootId() };
}

/** Whether the process recorded as `id` still runs (the same process, not a reuse of its pid). */
export function isSameProcess(id: ProcessIdentity): boolean {
  const now = identify(id.pid);
  if (now === null) return false;
  if (id.bootId !== null && id.bootId !== now.bootId) return false;
  if (id.startTicks !== null && now.startTicks !== null && id.startTicks !== now.startTicks) return false;
  // A zombie has exited: only its parent's wait is missing.
  return statFields(id.pid)?.[0] !== 'Z';
}

/** The process group a live process is in, when the system says (Linux). */
export function processGroupOf(pid: number): number | null {
  const group = Number(statFields(pid)?.[PROCESS_GROUP]);
  return Number.isInteger(group) && group > 0 ? group : null;
}

/**
 * Whether `pid` has a child that has exec'd another program (its command line is no longer a
 * copy of its parent's), or null when the system does not say (no /proc children list). A zombie
 * child counts: it ran something.
 */
export function hasExecedChild(pid: number): boolean | null {
  let children: string;
  let own: string;
  try {
    children = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8');
    own = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
  } catch {
    return null;
  }
  for (const child of children.split(' ')) {
    if (child === '') continue;
    try {
      if (readFileSync(`/proc/${child}/cmdline`, 'utf8') !== own) return true;
    } catch {
      // Gone between the two reads: it ran, and ended.
      return true;
    }
  }
  return false;
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
