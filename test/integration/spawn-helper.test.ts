import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { shimLines } from '../../src/executors/process/shim.js';
import { SpawnHelper } from '../../src/executors/process/spawn-helper.js';

const helpers: SpawnHelper[] = [];
const dirs: string[] = [];
afterEach(() => {
  for (const h of helpers.splice(0)) h.close();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function files() {
  const dir = mkdtempSync(join(tmpdir(), 'leoflow-helper-'));
  dirs.push(dir);
  return { dir, stdout: join(dir, 'stdout'), stderr: join(dir, 'stderr'), status: join(dir, 'status') };
}

/** Children of `pid` (zombies included). */
function childrenOf(pid: number): number[] {
  try {
    return execFileSync('ps', ['--ppid', String(pid), '-o', 'pid='], { encoding: 'utf8' })
      .split('\n')
      .map(Number)
      .filter((p) => p > 0);
  } catch (err) {
    if ((err as { status?: number }).status === 1) return []; // ps found none
    throw err;
  }
}

function helperPid(): number {
  const out = execFileSync('ps', ['--ppid', String(process.pid), '-o', 'pid=,args='], { encoding: 'utf8' });
  const pids = out
    .split('\n')
    .filter((l) => /\/bin\/sh -s$/.test(l.trim()))
    .map((l) => Number(l.trim().split(/\s+/)[0]));
  expect(pids).toHaveLength(1);
  return pids[0]!;
}

async function waitFor(cond: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 2000;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('SpawnHelper', () => {
  it('says "cwd" for a shim that could not enter its directory, and reaps it', async () => {
    const helper = new SpawnHelper({ logger: pino({ level: 'silent' }) });
    helpers.push(helper);
    expect(helper.usable).toBe(true);
    const f = files();
    const n = helper.nextNumber();
    const shim = shimLines(['true'], {}, join(f.dir, 'gone'), f, n);
    if ('error' in shim) throw new Error(shim.error);
    let ended = false;
    expect(await helper.start(n, f.dir, shim.lines, () => (ended = true))).toEqual({ ok: false, reason: 'cwd' });
    const pid = helperPid();
    await waitFor(() => childrenOf(pid).length === 0, 'the shim reaped');
    expect(ended).toBe(false);
  });

  it('starts a shim that leads its own session, says its pid, and says when its status is written', async () => {
    const helper = new SpawnHelper({ logger: pino({ level: 'silent' }) });
    helpers.push(helper);
    const f = files();
    const n = helper.nextNumber();
    const shim = shimLines(['sh', '-c', 'sleep 0.2; echo out; exit 4'], {}, null, f, n);
    if ('error' in shim) throw new Error(shim.error);
    let ended!: () => void;
    const endSaid = new Promise<void>((r) => (ended = r));
    const started = await helper.start(n, f.dir, shim.lines, () => ended());
    if (!started.ok) throw new Error(started.reason);
    // Its own session and group, the helper's child.
    const [sid, pgid, ppid] = execFileSync('ps', ['-o', 'sid=,pgid=,ppid=', '-p', String(started.pid)], {
      encoding: 'utf8',
    })
      .trim()
      .split(/\s+/)
      .map(Number);
    expect([sid, pgid, ppid]).toEqual([started.pid, started.pid, helperPid()]);
    await endSaid;
    expect(execFileSync('cat', [f.status], { encoding: 'utf8' })).toBe('4\n');
    expect(execFileSync('cat', [f.stdout], { encoding: 'utf8' })).toBe('out\n');
    started.ended();
    await waitFor(() => childrenOf(helperPid()).length === 0, 'the shim reaped');
  });
});
