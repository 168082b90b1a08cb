import { spawn, spawnSync } from 'node:child_process';
import { afterEach, describe, expect, it } from 'vitest';
import { findMarkedBy, killOrphansOfAgent, supervisorMark } from '../../src/executors/process/supervisor-mark.js';
import { identify } from '../../src/executors/process/process-identity.js';
import { shimLines, SUPERVISOR_ENV } from '../../src/executors/process/shim.js';
import { isAlive, killGroupOf } from '../helpers/process-group.js';

/**
 * The agent's mark on its shims (LEOFLOW_SUPERVISOR) and the orphans a later process of the same
 * agent id kills before its Hello: only those whose supervising process is gone, never those of
 * a live one or those it re-attaches to.
 */

const started: number[] = [];
afterEach(() => {
  for (const pid of started.splice(0)) killGroupOf(pid);
});

/** A process group of its own carrying `mark`, as a shim does. */
function marked(mark: string, attemptDir?: string): number {
  const child = spawn('sleep', ['30'], {
    detached: true,
    stdio: 'ignore',
    env: { ...process.env, [SUPERVISOR_ENV]: mark, ...(attemptDir ? { LEOFLOW_ATTEMPT_DIR: attemptDir } : {}) },
  });
  child.unref();
  started.push(child.pid!);
  return child.pid!;
}

/** The identity of a process that has exited: its supervisor is gone. */
function deadSupervisor(): string {
  const r = spawnSync('sh', ['-c', 'echo $$']);
  return `${Number(r.stdout.toString().trim())} 12345`;
}

describe('supervisor mark', () => {
  it('names the agent and this process', () => {
    const me = identify(process.pid)!;
    expect(supervisorMark('a-1')).toEqual({ [SUPERVISOR_ENV]: `a-1 ${process.pid} ${me.startTicks}` });
  });

  it("a task's env can neither set nor unset it", () => {
    const r = shimLines(['true'], { [SUPERVISOR_ENV]: 'forged 1 1', OTHER: 'x' }, null, {
      dir: '/d',
      stdout: '/d/o',
      stderr: '/d/e',
      status: '/d/s',
    });
    expect('lines' in r && r.lines).toContain("export OTHER='x'");
    expect('lines' in r && r.lines).not.toContain(SUPERVISOR_ENV);
  });

  it('kills the groups of a gone supervisor and proves them dead; spares a live one, a kept folder and other ids', async () => {
    const id = `unit-${process.pid}`;
    const orphan = marked(`${id} ${deadSupervisor()}`);
    const kept = marked(`${id} ${deadSupervisor()}`, '/state/attempts/1.1.x');
    const ofLive = marked(supervisorMark(id)[SUPERVISOR_ENV]!);
    const otherId = marked(`${id}-other ${deadSupervisor()}`);
    await new Promise((r) => setTimeout(r, 100)); // exec'd, with its environment
    expect(
      findMarkedBy(id)
        .map((p) => p.pid)
        .sort(),
    ).toEqual([orphan, kept, ofLive].sort());

    const r = await killOrphansOfAgent(id, new Set(['/state/attempts/1.1.x']));
    expect(r).toEqual({ killed: 1, ofLiveSupervisor: 1 });
    expect(isAlive(orphan)).toBe(false);
    expect([kept, ofLive, otherId].map(isAlive)).toEqual([true, true, true]);
  });
});
