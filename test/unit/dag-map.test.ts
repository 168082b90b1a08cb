import { describe, expect, it } from 'vitest';
import { advanceRun, type TiStateView } from '../../src/core/advance-run.js';
import { parseDag } from '../../src/core/dag/parse-dag.js';
import { groupMapped } from '../../src/cli/group-mapped.js';
import { task } from '../helpers/spec-builders.js';
import { issuesOf } from '../helpers/dag-sources.js';

const dag = (tasks: string) => `dag_id: d\ntasks:\n${tasks}`;

describe('map:', () => {
  it('is read with its upstream, path and max_parallel', () => {
    const spec = parseDag(
      dag(`  - { id: gen, command: "true" }
  - { id: each, command: "true", depends_on: [gen], map: { over: gen.out.items, max_parallel: 4 } }
`),
      'd.yaml',
    );
    expect(spec.tasks[1]!.map).toEqual({ upstream: 'gen', path: ['out', 'items'], maxParallel: 4 });
  });

  it('refuses cache: on a mapped task, whose items would share one key', () => {
    const issues = issuesOf(
      dag(`  - { id: gen, command: "true" }
  - { id: each, command: "true", depends_on: [gen], map: { over: gen.items }, cache: { key: conf, ttl: 1d } }
`),
    );
    expect(issues.map((i) => i.path)).toEqual(['tasks[1].cache']);
    expect(issues[0]!.message).toContain('may not have "cache"');
  });

  it('refuses an upstream not in depends_on, a bad max_parallel and a missing over', () => {
    const issues = issuesOf(
      dag(`  - { id: gen, command: "true" }
  - { id: a, command: "true", map: { over: gen.items } }
  - { id: b, command: "true", depends_on: [gen], map: { over: gen.items, max_parallel: 0 } }
  - { id: c, command: "true", depends_on: [gen], map: { max_parallel: 2 } }
`),
    );
    expect(issues.map((i) => i.path)).toEqual(['tasks[1].map.over', 'tasks[2].map.max_parallel', 'tasks[3].map.over']);
    expect(issues[0]!.message).toContain('which is not in depends_on');
  });
});

describe('advancing a mapped task', () => {
  const tasks = [task('gen'), task('each', { dependsOn: ['gen'], map: { upstream: 'gen', path: [], maxParallel: 2 } })];
  const view = (state: TiStateView['state'], mapCount?: number): TiStateView => ({
    state,
    nextTryAt: null,
    pendingReason: null,
    ...(mapCount !== undefined ? { mapCount } : {}),
  });
  const now = new Date();

  it('expands once its upstream succeeded', () => {
    const d = advanceRun(
      tasks,
      new Map([
        ['gen', view('success')],
        ['each', view('none')],
      ]),
      now,
    );
    expect(d.expand).toEqual(['each']);
    expect(d.schedule).toEqual([]);
    expect(d.outcome).toBeNull();
  });

  it('schedules mapped instances in item order while max_parallel has room, the rest saying why', () => {
    const tis = new Map([
      ['gen', view('success')],
      ['each', view('waiting', 5)],
      ['each[0]', view('running')],
      ['each[10]', view('none')],
      ['each[2]', view('none')],
      ['each[3]', view('none')],
    ]);
    const d = advanceRun(tasks, tis, now);
    expect(d.schedule).toEqual(['each[2]']);
    expect(d.reasons.get('each[3]')).toBe('MAX_PARALLEL:2');
    expect(d.reasons.get('each[10]')).toBe('MAX_PARALLEL:2');
    expect(d.settle).toEqual([]);
  });

  it('schedules no more mapped instances than the dispatch pool has room for, the rest saying why', () => {
    const free = [task('gen'), task('each', { dependsOn: ['gen'], map: { upstream: 'gen', path: [] } })];
    const tis = new Map([
      ['gen', view('success')],
      ['each', view('waiting', 4)],
      ['each[3]', view('none')],
      ['each[1]', view('none')],
      ['each[2]', view('none')],
    ]);
    const d = advanceRun(free, tis, now, { room: 2, reason: 'POOL_FULL' });
    expect(d.schedule).toEqual(['each[1]', 'each[2]']);
    expect(d.reasons.get('each[3]')).toBe('POOL_FULL');
    expect(d.heldForRoom).toBe(true);
    expect(advanceRun(free, tis, now).schedule).toEqual(['each[1]', 'each[2]', 'each[3]']);
  });

  it('asks to settle a mapped task none of whose instances is left to run', () => {
    const d = advanceRun(
      tasks,
      new Map([
        ['gen', view('success')],
        ['each', view('waiting', 3)],
      ]),
      now,
    );
    expect(d.settle).toEqual(['each']);
    expect(d.outcome).toBeNull();
  });
});

describe('run show', () => {
  it('groups mapped instances into one row with counts by state', () => {
    const tis = [
      { taskId: 'gen', s: 'success' },
      { taskId: 'each', s: 'waiting' },
      ...Array.from({ length: 1000 }, (_, i) => ({ taskId: `each[${i}]`, s: i < 998 ? 'success' : 'failed' })),
      { taskId: 'after', s: 'none' },
    ];
    const rows = groupMapped(tis, (t) => t.s);
    expect(rows.map((r) => (r.kind === 'one' ? r.ti.taskId : `${r.task}:${r.count}:${r.states}`))).toEqual([
      'gen',
      'each',
      'each:1000:998 success, 2 failed',
      'after',
    ]);
  });
});
