import { readFileSync } from 'node:fs';

/** Whether the process runs: a zombie (killed, not yet reaped) does not. */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat[stat.lastIndexOf(')') + 2] !== 'Z';
  } catch {
    return false;
  }
}

/**
 * SIGKILL to the whole process group `pid` is in: a task's, which its shim leads (the shim, the
 * task and its children), as a reboot would end them.
 */
export function killGroupOf(pid: number): void {
  let group = pid;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    group = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[2]);
  } catch {
    // Gone already, or no /proc: the pid is the best guess.
  }
  try {
    process.kill(-group, 'SIGKILL');
  } catch {
    // already gone
  }
}
