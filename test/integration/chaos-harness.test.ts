import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DbRecord, DbTi, DbTry } from '../helpers/chaos/db-record.js';
import { checkInvariants, type ChaosEvidence } from '../helpers/chaos/invariants.js';
import { executionKey, ledgerOf, ledgerTaskScript } from '../helpers/chaos/ledger.js';
import { createPrng } from '../helpers/chaos/prng.js';
import { watchTasks } from '../helpers/chaos/task-watch.js';

/**
 * The chaos test's own parts: the ledger task script, the ledger parser and each invariant check,
 * on made-up evidence, so the chaos test can fail for each promise and for nothing else.
 */

describe('the ledger task script', () => {
  let dir: string;
  let script: string;
  let ledger: string;
  beforeAll(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'leoflow-chaos-unit-'));
    ledger = path.join(dir, 'ledger.log');
    script = path.join(dir, 'task.sh');
    await writeFile(script, ledgerTaskScript(ledger));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  function run(
    env: Record<string, string>,
    onStart?: (pid: number) => void,
  ): Promise<{ code: number | null; pid: number; exitedUs: number }> {
    const child = spawn('sh', [script], {
      env: {
        ...process.env,
        LEOFLOW_RUN_ID: '7',
        LEOFLOW_TASK_ID: 'load',
        LEOFLOW_TI_ID: '70',
        LEOFLOW_TRY_NUMBER: '1',
        ...env,
      },
      stdio: 'ignore',
      // Its own process group, so its background sleep goes with it (below).
      detached: true,
    });
    onStart?.(child.pid!);
    return new Promise((resolve) =>
      child.on('exit', (code) => {
        const exitedUs = Date.now() * 1000;
        try {
          process.kill(-child.pid!, 'SIGKILL');
        } catch {
          // the group is gone already
        }
        resolve({ code, pid: child.pid!, exitedUs });
      }),
    );
  }

  it('writes a start and an end line, and exits with the status its end line says', async () => {
    const ok = await run({ LEOFLOW_TRY_NUMBER: '2', CHAOS_FAIL_FIRST_TRY: '1' });
    const failed = await run({ CHAOS_FAIL_FIRST_TRY: '1', CHAOS_QUIET_END: '1' });
    expect([ok.code, failed.code]).toEqual([0, 3]);
    const l = ledgerOf(await readFile(ledger, 'utf8'));
    expect(l.malformed).toEqual([]);
    expect(l.executions.map((e) => [e.run, e.task, e.try, e.ti, e.pid, e.endKind, e.exit])).toEqual([
      ['7', 'load', 2, '70', ok.pid, 'end', 0],
      ['7', 'load', 1, '70', failed.pid, 'end', 3],
    ]);
    for (const e of l.executions) {
      expect(e.endUs! - e.startUs!).toBeGreaterThanOrEqual(40_000);
      expect(Math.abs(e.startUs! - Date.now() * 1000)).toBeLessThan(10_000_000);
    }
  });

  it('writes a term line at once on SIGTERM', async () => {
    await writeFile(ledger, '');
    let signalled = 0;
    const r = await run({ CHAOS_SLEEP_MS: '5000' }, (pid) => {
      const poll = setInterval(() => {
        void readFile(ledger, 'utf8').then((t) => {
          if (t.includes(' start ') && signalled === 0) {
            clearInterval(poll);
            signalled = Date.now();
            process.kill(pid, 'SIGTERM');
          }
        });
      }, 5);
    });
    expect(Date.now() - signalled).toBeLessThan(1000);
    expect(r.code).toBe(143);
    const [e] = ledgerOf(await readFile(ledger, 'utf8')).executions;
    expect([e!.endKind, e!.exit]).toEqual(['term', 143]);
  });

  it('is watched while it lives: a live target, then the last time it was seen alive once SIGKILLed', async () => {
    await writeFile(ledger, '');
    const watch = watchTasks({ ledgerPath: ledger, scriptPath: script, everyMs: 10 });
    try {
      let killedAtUs = 0;
      const r = await run({ CHAOS_SLEEP_MS: '5000' }, (pid) => {
        const poll = setInterval(() => {
          const live = watch.live();
          if (live.length === 1 && live[0]!.line.pid === pid && killedAtUs === 0) {
            clearInterval(poll);
            killedAtUs = Date.now() * 1000;
            process.kill(pid, 'SIGKILL');
          }
        }, 5);
      });
      watch.poll();
      expect(r.code).toBeNull();
      expect(watch.live()).toEqual([]);
      const [e] = ledgerOf(await readFile(ledger, 'utf8')).executions;
      expect(e!.endKind).toBeNull();
      const seen = watch.lastSeen().get(executionKey(e!))!;
      // A SIGKILLed process lives on until it is scheduled to die: seen alive after the kill, never after its exit.
      expect(seen).toBeGreaterThanOrEqual(e!.startUs!);
      expect(seen).toBeGreaterThan(killedAtUs - 1_000_000);
      expect(seen).toBeLessThanOrEqual(r.exitedUs);
    } finally {
      watch.stop();
    }
  });
});

describe('the ledger parser', () => {
  it('keeps whole lines only, and the first end-ish line of a process', () => {
    const l = ledgerOf(
      [
        'L start 1 a 1 100 1700000000000000000 - 10 E',
        'L end 1 a 1 100 1700000000500000000 0 10 E',
        'L term 1 a 1 100 1700000000600000000 143 10 E',
        'L start 1 b 1 101 17000000',
        'garbage',
        '',
      ].join('\n'),
    );
    expect(l.malformed).toEqual(['L start 1 b 1 101 17000000', 'garbage']);
    expect(l.executions).toEqual([
      {
        run: '1',
        task: 'a',
        try: 1,
        ti: '10',
        pid: 100,
        startUs: 1700000000000000,
        endUs: 1700000000500000,
        endKind: 'end',
        exit: 0,
      },
    ]);
  });
});

describe('the invariant checks', () => {
  const T0 = 1_700_000_000_000;
  const us = (ms: number) => (T0 + ms) * 1000;
  const line = (kind: string, task: string, tryN: number, pid: number, ms: number, exit: string) =>
    `L ${kind} 1 ${task} ${tryN} ${pid} ${BigInt(us(ms)) * 1000n} ${exit} 10 E`;

  function dbWith(tis: { task: string; state: string; tries: Partial<DbTry>[] }[], runState = 'success'): DbRecord {
    const map = new Map<string, DbTi>();
    tis.forEach((t, i) => {
      const tries = new Map(
        t.tries.map((x, k) => [
          k + 1,
          { try: k + 1, claims: 1, agents: [], started: true, outcome: null, reason: null, ...x },
        ]),
      );
      map.set(`1/${t.task}`, {
        id: String(i + 10),
        run: '1',
        task: t.task,
        state: t.state,
        tryNumber: tries.size,
        tries,
        history: [],
      });
    });
    return { runs: [{ id: '1', dagId: 'd', state: runState }], tis: map };
  }

  function evidence(lines: string[], db: DbRecord, extra: Partial<ChaosEvidence> = {}): ChaosEvidence {
    return {
      seed: 1,
      t0Ms: T0,
      ledger: ledgerOf(lines.join('\n')),
      lastSeen: new Map(),
      kills: [],
      db,
      faults: [],
      unexpectedExits: [],
      ...extra,
    };
  }

  const failing = (ev: ChaosEvidence) =>
    checkInvariants(ev)
      .filter((r) => r.violations.length > 0)
      .map((r) => r.name);

  it('finds nothing in a clean history: a failed try, then its retry after it ended', () => {
    const ev = evidence(
      [
        line('start', 'a', 1, 100, 0, '-'),
        line('end', 'a', 1, 100, 300, '3'),
        line('start', 'a', 2, 101, 600, '-'),
        line('end', 'a', 2, 101, 900, '0'),
      ],
      dbWith([{ task: 'a', state: 'success', tries: [{ outcome: 'up_for_retry' }, { outcome: 'success' }] }]),
    );
    expect(failing(ev)).toEqual([]);
  });

  it('a run not terminal', () => {
    expect(failing(evidence([], dbWith([], 'running')))).toEqual(['every run terminal']);
  });

  it('one try in two processes, alive together, the database knowing one', () => {
    const ev = evidence(
      [
        line('start', 'a', 1, 100, 0, '-'),
        line('start', 'a', 1, 200, 100, '-'),
        line('end', 'a', 1, 100, 400, '0'),
        line('end', 'a', 1, 200, 500, '0'),
      ],
      dbWith([{ task: 'a', state: 'success', tries: [{ outcome: 'success' }] }]),
    );
    expect(failing(ev)).toEqual([
      'no (run, task, try) in the ledger twice',
      'no two executions of a task overlapping in time',
    ]);
  });

  it('a try the database never claimed', () => {
    const ev = evidence(
      [line('start', 'a', 2, 100, 0, '-'), line('end', 'a', 2, 100, 300, '0')],
      dbWith([{ task: 'a', state: 'success', tries: [{ outcome: 'success' }] }]),
    );
    const [r] = checkInvariants(ev).filter((x) => x.violations.length > 0);
    expect(r!.name).toBe('no try in the ledger that the database never recorded');
    expect(r!.violations[0]).toMatch(
      /^1\/a\/2 \(run\/task\/try\) ran, but the database never claimed that try \(its tries: 1\)/,
    );
  });

  it('an overlap proved by the last time a process without an end line was seen alive, and none without proof', () => {
    const lines = [
      line('start', 'a', 1, 100, 0, '-'),
      line('start', 'a', 2, 101, 1000, '-'),
      line('end', 'a', 2, 101, 1300, '0'),
    ];
    const db = dbWith([
      {
        task: 'a',
        state: 'success',
        tries: [{ outcome: 'up_for_retry', reason: 'agent_lost' }, { outcome: 'success' }],
      },
    ]);
    const key = executionKey({ run: '1', task: 'a', try: 1, pid: 100 });
    // Seen alive until 900 ms: it died before try 2 started, as far as anyone can tell.
    expect(failing(evidence(lines, db, { lastSeen: new Map([[key, us(900)]]) }))).toEqual([]);
    // Seen alive at 1100 ms, after try 2's start line.
    const ev = evidence(lines, db, { lastSeen: new Map([[key, us(1100)]]) });
    const r = checkInvariants(ev).find((x) => x.violations.length > 0)!;
    expect(r.name).toBe('no two executions of a task overlapping in time');
    expect(r.violations[0]).toMatch(/alive together for at least 100 ms/);
  });

  it('a success recorded as failed or lost, unless the harness killed that process', () => {
    const lines = [
      line('start', 'a', 1, 100, 0, '-'),
      line('end', 'a', 1, 100, 300, '0'),
      line('start', 'b', 1, 200, 0, '-'),
      line('end', 'b', 1, 200, 300, '0'),
    ];
    const db = dbWith([
      { task: 'a', state: 'failed', tries: [{ outcome: 'failed', reason: 'agent_lost' }] },
      { task: 'b', state: 'failed', tries: [{ outcome: 'failed' }] },
    ]);
    const kills = [{ pid: 200, key: executionKey({ run: '1', task: 'b', try: 1, pid: 200 }), atUs: us(300) }];
    const r = checkInvariants(evidence(lines, db, { kills })).find((x) => x.violations.length > 0)!;
    expect(r.name).toBe('no attempt that succeeded recorded as failed');
    expect(r.violations).toHaveLength(1);
    expect(r.violations[0]).toMatch(/^1\/a\/1 \(run\/task\/try\) exited 0, recorded failed \(agent_lost\)/);
  });

  it('a replica that exited by itself', () => {
    const ev = evidence([], dbWith([]), {
      unexpectedExits: [
        { member: 'replica-a', kind: 'replica', atMs: T0 + 5000, code: 1, signal: null, tail: 'TypeError' },
      ],
    });
    expect(failing(ev)).toEqual(['no replica exited by itself (the scheduler never dies)']);
  });
});

describe('the seeded generator', () => {
  it('replays a seed, and its forks are independent streams', () => {
    const draw = (seed: number) => {
      const p = createPrng(seed);
      const f = p.fork('faults');
      return [p.int(0, 1000), p.pick(['a', 'b', 'c']), f.weighted({ x: 1, y: 2 }), f.next()];
    };
    expect(draw(42)).toEqual(draw(42));
    expect(draw(42)).not.toEqual(draw(43));
    expect(createPrng(1).fork('a').next()).not.toBe(createPrng(1).fork('b').next());
  });
});
