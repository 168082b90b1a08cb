import { describe, expect, it } from 'vitest';
import { attemptEnv } from '../../src/core/attempt-env.js';
import { idempotencyKey } from '../../src/core/idempotency-key.js';

const base = {
  dagId: 'etl',
  runId: '3',
  taskId: 'load',
  tiId: '7',
  maxTries: 3,
  install: 'a'.repeat(32),
  logicalDate: new Date(0),
  conf: {},
  taskEnv: {},
};

describe('LEOFLOW_IDEMPOTENCY_KEY', () => {
  it('is the same across the tries of a task instance, and 32 hex characters', () => {
    const first = attemptEnv({ ...base, tryNumber: 1 }).LEOFLOW_IDEMPOTENCY_KEY;
    const second = attemptEnv({ ...base, tryNumber: 2 }).LEOFLOW_IDEMPOTENCY_KEY;
    expect(first).toMatch(/^[0-9a-f]{32}$/);
    expect(second).toBe(first);
  });

  it('differs for another run, another task and another install', () => {
    const key = idempotencyKey(base.install, '3', 'load');
    expect(idempotencyKey(base.install, '4', 'load')).not.toBe(key);
    expect(idempotencyKey(base.install, '3', 'extract')).not.toBe(key);
    expect(idempotencyKey('b'.repeat(32), '3', 'load')).not.toBe(key);
  });

  it('cannot be made to collide by moving a character between the run and the task id', () => {
    expect(idempotencyKey(base.install, '3-a', 'b')).not.toBe(idempotencyKey(base.install, '3', 'a-b'));
  });
});
