import { readdirSync, readFileSync } from 'node:fs';
import { processGroupOf } from './process-identity.js';

/** A process found by a variable in its environment. */
export interface MarkedProcessEntry {
  pid: number;
  /** Its process group (never this process's own, never 0 or 1). */
  group: number;
  /** The environment entry that matched (`NAME=value`). */
  mark: string;
  /** Its whole environment, `NAME=value` each. */
  environ: string[];
}

/**
 * Every process outside this process's group whose environment has an entry starting with
 * `prefix`, read from /proc (Linux). Our shims and tasks are marked so a restarted parent can find
 * them without any record of its own; another user's processes, or ones gone meanwhile, are skipped.
 */
export function processesMarked(prefix: string): MarkedProcessEntry[] {
  const ownGroup = processGroupOf(process.pid);
  const found: MarkedProcessEntry[] = [];
  let pids: string[];
  try {
    pids = readdirSync('/proc').filter((n) => /^\d+$/.test(n));
  } catch {
    return found;
  }
  for (const name of pids) {
    const pid = Number(name);
    let environ: string[];
    try {
      environ = readFileSync(`/proc/${pid}/environ`, 'latin1').split('\0');
    } catch {
      continue; // gone, or another user's
    }
    const mark = environ.find((e) => e.startsWith(prefix));
    if (mark === undefined) continue;
    const group = processGroupOf(pid);
    if (group === null || group === ownGroup || group <= 1) continue;
    found.push({ pid, group, mark, environ });
  }
  return found;
}
