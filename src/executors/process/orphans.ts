import path from 'node:path';
import { processesMarked } from './processes-marked.js';
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
  const found: Orphan[] = processesMarked(`${ATTEMPT_DIR_ENV}=${dirPrefix}`)
    .map(({ pid, group, mark }) => ({ pid, group, attemptDir: mark.slice(ATTEMPT_DIR_ENV.length + 1) }))
    .filter((o) => chosen(o.attemptDir));
  for (const group of new Set(found.map((o) => o.group))) {
    try {
      process.kill(-group, 'SIGKILL');
    } catch {
      // ESRCH: gone meanwhile.
    }
  }
  return found;
}
