import { closeSync, openSync, readFileSync, readSync } from 'node:fs';
import { executionKey, parseLedgerLine, type LedgerLine } from './ledger.js';

/**
 * Watches the task processes the ledger names while they live, for two things the ledger cannot
 * say: which tasks are running now (the targets of "SIGKILL a task process"), and until when a
 * process that never wrote its end line was alive (it was killed, by the harness or by whoever
 * supervises it). Every few tens of milliseconds it reads the new ledger lines and looks at each
 * live task's /proc/PID/stat; a process is alive while that file exists, is not a zombie and has
 * the start time it had when first seen (a pid can be reused). `lastSeenUs` is taken before each
 * look, so it is a time the process was certainly alive: the overlap check uses it as a lower
 * bound of the end, and so never reports an overlap that did not happen.
 */

export interface WatchedTask {
  key: string;
  line: LedgerLine;
  /** Field 22 of /proc/PID/stat when first seen: tells this process from a later one with its pid. */
  startTime: string;
  lastSeenUs: number;
}

export interface TaskWatch {
  /** Tasks that are running now (not ended by their own lines, and alive at the last look). */
  live(): WatchedTask[];
  /** The last time each process that is gone was seen alive, by execution key. */
  lastSeen(): ReadonlyMap<string, number>;
  /** Whether `t` is still the process first seen (same pid, same start time, not a zombie). */
  stillAlive(t: WatchedTask): boolean;
  /** Looks once, now. */
  poll(): void;
  stop(): void;
}

/** Field 3 (state) and field 22 (start time) of /proc/PID/stat, or null if there is no such process. */
export function procStat(pid: number): { state: string; startTime: string } | null {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return null;
  }
  // The command name (field 2) is in parentheses and may hold spaces: count from its end.
  const rest = text.slice(text.lastIndexOf(')') + 2).split(' ');
  return { state: rest[0]!, startTime: rest[19]! };
}

function cmdline(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ');
  } catch {
    return '';
  }
}

export function watchTasks(opts: { ledgerPath: string; scriptPath: string; everyMs?: number }): TaskWatch {
  const live = new Map<string, WatchedTask>();
  const ended = new Set<string>();
  const lastSeen = new Map<string, number>();
  let offset = 0;
  let partial = '';
  const buf = Buffer.alloc(1 << 16);

  const readNewLines = (): LedgerLine[] => {
    let fd: number;
    try {
      fd = openSync(opts.ledgerPath, 'r');
    } catch {
      return [];
    }
    const chunks: string[] = [];
    try {
      for (;;) {
        const n = readSync(fd, buf, 0, buf.length, offset);
        if (n === 0) break;
        offset += n;
        chunks.push(buf.toString('utf8', 0, n));
      }
    } finally {
      closeSync(fd);
    }
    const text = partial + chunks.join('');
    const parts = text.split('\n');
    partial = parts.pop()!;
    return parts.map(parseLedgerLine).filter((l): l is LedgerLine => l !== null);
  };

  const alive = (t: WatchedTask): boolean => {
    const s = procStat(t.line.pid);
    return s !== null && s.state !== 'Z' && s.state !== 'X' && s.startTime === t.startTime;
  };

  const poll = () => {
    for (const l of readNewLines()) {
      const key = executionKey(l);
      if (l.kind !== 'start') {
        ended.add(key);
        live.delete(key);
        continue;
      }
      if (ended.has(key)) continue;
      const seenAt = Date.now() * 1000;
      const s = procStat(l.pid);
      // Only a process running our script is this task (its pid may already be someone else's).
      if (s === null || s.state === 'Z' || !cmdline(l.pid).includes(opts.scriptPath)) {
        lastSeen.set(key, l.atUs);
        continue;
      }
      live.set(key, { key, line: l, startTime: s.startTime, lastSeenUs: Math.max(seenAt, l.atUs) });
    }
    for (const [key, t] of live) {
      const before = Date.now() * 1000;
      if (alive(t)) t.lastSeenUs = Math.max(t.lastSeenUs, before);
      else {
        live.delete(key);
        lastSeen.set(key, t.lastSeenUs);
      }
    }
  };

  const timer = setInterval(poll, opts.everyMs ?? 20);
  return {
    live: () => [...live.values()],
    lastSeen: () => {
      const all = new Map(lastSeen);
      for (const [key, t] of live) all.set(key, t.lastSeenUs);
      return all;
    },
    stillAlive: alive,
    poll,
    stop: () => clearInterval(timer),
  };
}
