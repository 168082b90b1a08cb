import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { processGroupOf } from './process-identity.js';
import { ATTEMPT_DIR_ENV } from './shim.js';

export interface Orphan {
  pid: number;
  group: number;
  attemptDir: string;
}

/**
 * Kills every task process group started under `root` that no one supervises any more: its
 * attempt's folder is gone, or was not re-attached (`keep` holds those that were). This is how a
 * restart proves an attempt it could not adopt dead before another try of it starts. Each task
 * carries its attempt's folder in its environment (shim.ts), which survives the folder itself.
 * Only Linux lists processes with their environment (/proc); elsewhere nothing is found.
 */
export function killOrphans(root: string, keep: ReadonlySet<string>): Orphan[] {
  return killGroupsOf(`${path.resolve(root)}${path.sep}`, (dir) => !keep.has(dir));
}

/**
 * Kills every process group whose processes carry one of `dirs` as their attempt's folder: the
 * shims (and their tasks) of starts that are given up on, found by the folder the spawn helper
 * puts in their environment (spawn-helper.ts).
 */
export function killAttemptGroups(dirs: ReadonlySet<string>): Orphan[] {
  return dirs.size === 0 ? [] : killGroupsOf('', (dir) => dirs.has(dir));
}

function killGroupsOf(dirPrefix: string, chosen: (attemptDir: string) => boolean): Orphan[] {
  const prefix = `${ATTEMPT_DIR_ENV}=${dirPrefix}`;
  const ownGroup = processGroupOf(process.pid);
  const found: Orphan[] = [];
  let pids: string[];
  try {
    pids = readdirSync('/proc').filter((n) => /^\d+$/.test(n));
  } catch {
    return found;
  }
  for (const name of pids) {
    const pid = Number(name);
    let environ: string;
    try {
      environ = readFileSync(`/proc/${pid}/environ`, 'latin1');
    } catch {
      continue; // gone, or another user's
    }
    const entry = environ.split('\0').find((e) => e.startsWith(prefix));
    if (entry === undefined) continue;
    const attemptDir = entry.slice(ATTEMPT_DIR_ENV.length + 1);
    if (!chosen(attemptDir)) continue;
    const group = processGroupOf(pid);
    if (group === null || group === ownGroup || group <= 1) continue;
    found.push({ pid, group, attemptDir });
  }
  for (const group of new Set(found.map((o) => o.group))) {
    try {
      process.kill(-group, 'SIGKILL');
    } catch {
      // ESRCH: gone meanwhile.
    }
  }
  return found;
}
