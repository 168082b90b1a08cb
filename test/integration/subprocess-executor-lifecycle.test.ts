import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { SHUTDOWN_ERROR } from '../../src/executors/subprocess/subprocess-executor.js';
import {
  attempt,
  cleanUpAfterEach,
  expectGone,
  isRunning,
  describeEachSpawnWay,
  setup,
  tempDir,
  waitFor,
} from '../helpers/subprocess-bench.js';
import { SUCCEEDED } from '../helpers/attempt-outcomes.js';

cleanUpAfterEach();

describeEachSpawnWay('subprocess executor, heartbeats and shutdown', () => {
  it('heartbeats live attempts and stops one the store no longer considers current', async () => {
    const { reporter, executor } = setup({ heartbeatIntervalMs: 50 });
    const keep = attempt(['sleep', '30']);
    const drop = attempt(['sleep', '30']);
    await executor.dispatch(keep);
    await executor.dispatch(drop);
    const both = [keep.tiId, drop.tiId].sort();
    await waitFor(() => reporter.heartbeats.some((h) => h.join() === both.join()), 2000, 'a heartbeat of both');
    expect(reporter.finishedCalls).toEqual([]);

    reporter.heartbeatDrops = new Set([drop.tiId]);
    expect(await reporter.finishedOf(drop.tiId)).toMatchObject({ outcome: 'superseded', signal: 'SIGTERM' });
    await expectGone(reporter.pidOf(drop.tiId));
    const seen = reporter.heartbeats.length;
    await waitFor(() => reporter.heartbeats.length > seen, 2000, 'a later heartbeat');
    expect(reporter.heartbeats.at(-1)).toEqual([keep.tiId]);
    expect(isRunning(reporter.pidOf(keep.tiId))).toBe(true);
  });

  it('a rejected heartbeat kills nothing and is retried', async () => {
    const { reporter, executor, logLines } = setup({ heartbeatIntervalMs: 50 });
    reporter.heartbeatDrops = new Error('connection terminated');
    const a = attempt(['sleep', '30']);
    await executor.dispatch(a);
    await waitFor(() => reporter.heartbeats.length >= 3, 2000, 'three heartbeats');
    expect(isRunning(reporter.pidOf(a.tiId))).toBe(true);
    expect(reporter.finishedCalls).toEqual([]);
    expect(executor.activeCount).toBe(1);
    expect(logLines.some((l) => l.includes('heartbeat failed'))).toBe(true);
  });

  it('a duplicate dispatch of a live ti spawns once', async () => {
    const { reporter, executor } = setup();
    const marker = join(tempDir(), 'spawns');
    const a = attempt(['sh', '-c', `echo x >> '${marker}'; sleep 30`]);
    await Promise.all([executor.dispatch(a), executor.dispatch(a)]);
    await executor.dispatch({ ...a });
    await waitFor(() => existsSync(marker) && readFileSync(marker, 'utf8').length > 0, 2000, 'the marker');
    await new Promise((r) => setTimeout(r, 100));
    expect(readFileSync(marker, 'utf8')).toBe('x\n');
    expect(reporter.startedCalls).toHaveLength(1);
    expect(executor.activeCount).toBe(1);
  });

  it('shutdown lets a short task finish, stops a long one as failed, then refuses work', async () => {
    const { reporter, executor } = setup({ killGraceMs: 200 });
    const short = attempt(['sh', '-c', 'sleep 0.3; echo done']);
    const long = attempt(['sleep', '30']);
    await executor.dispatch(short);
    await executor.dispatch(long);
    const startedAt = Date.now();
    await executor.shutdown(1000);
    const took = Date.now() - startedAt;
    expect(took).toBeGreaterThanOrEqual(1000 - 20);
    expect(took).toBeLessThan(2500);
    // Both reports resolved before shutdown did.
    expect(reporter.finishedCalls.find((c) => c.tiId === short.tiId)?.result).toEqual(SUCCEEDED);
    expect(reporter.lines(short.tiId, 'stdout')).toEqual(['done']);
    expect(reporter.finishedCalls.find((c) => c.tiId === long.tiId)?.result).toEqual({
      exitCode: null,
      signal: 'SIGTERM',
      error: SHUTDOWN_ERROR,
      outcome: 'failed',
    });
    expect(executor.activeCount).toBe(0);
    await expect(executor.dispatch(attempt(['true']))).rejects.toThrow(/shutting down/);
  });

  it('shutdown resolves as soon as live attempts end by themselves', async () => {
    const { reporter, executor } = setup();
    const a = attempt(['sh', '-c', 'sleep 0.2']);
    await executor.dispatch(a);
    const startedAt = Date.now();
    await executor.shutdown(5000);
    expect(Date.now() - startedAt).toBeLessThan(1500);
    expect(reporter.finishedCalls.map((c) => c.result.outcome)).toEqual(['success']);
  });

  it('survives a reporter that throws: the child still runs, ends and is reaped', async () => {
    const { reporter, executor, logLines } = setup();
    reporter.startedAnswer = new Error('db down');
    reporter.log = () => {
      throw new Error('log buffer full');
    };
    const finished = reporter.finished.bind(reporter);
    reporter.finished = async (att, result) => {
      await finished(att, result);
      throw new Error('db down');
    };
    const a = attempt(['sh', '-c', 'echo hi; exit 4']);
    await executor.dispatch(a);
    expect((await reporter.finishedOf(a.tiId)).outcome).toBe('failed');
    await executor.shutdown(1000);
    await expectGone(reporter.pidOf(a.tiId));
    const errors = logLines.map((l) => JSON.parse(l) as { msg: string; tiId?: string; tryNumber?: number });
    expect(errors.some((e) => e.msg.startsWith('reporting started failed') && e.tiId === a.tiId)).toBe(true);
    expect(errors.some((e) => e.msg === 'reporting finished failed' && e.tryNumber === 1)).toBe(true);
    expect(errors.some((e) => e.msg === 'reporting a log line failed')).toBe(true);
  });
});
