import { describe, expect, it } from 'vitest';
import { parseDag } from '../../src/core/dag/parse-dag.js';
import { resolveMatch, waitStart } from '../../src/core/wait-start.js';
import { bindInputs, inputRefs, refTaskCandidates } from '../../src/core/match-inputs.js';
import { advanceRun, type TiStateView } from '../../src/core/advance-run.js';
import { task } from '../helpers/spec-builders.js';
import { issuesOf } from '../helpers/dag-sources.js';

const dag = (tasks: string) => `dag_id: d\ntasks:\n${tasks}`;

describe('a wait task', () => {
  it('is read with its event, match, timeout, look back and outcome at the timeout, and has no command', () => {
    const spec = parseDag(
      dag(`  - id: w
    wait: { event: file.landed, match: { bucket: raw, n: [1, 2] }, timeout: 2h, look_back: 10m, on_timeout: skipped }
  - { id: after, command: "echo hi", depends_on: [w] }
`),
      'd.yaml',
    );
    expect(spec.tasks[0]).toMatchObject({
      id: 'w',
      command: [],
      wait: {
        event: 'file.landed',
        match: { bucket: 'raw', n: [1, 2] },
        timeoutMs: 7_200_000,
        lookBackMs: 600_000,
        onTimeout: 'skipped',
      },
    });
    expect(spec.tasks[0]!.approval).toBeUndefined();
    expect(spec.tasks[1]!.wait).toBeUndefined();
  });

  it('fails at its timeout unless told otherwise, and looks back only when told', () => {
    const spec = parseDag(dag('  - { id: w, wait: { event: e, timeout: 30s } }\n'), 'd.yaml');
    expect(spec.tasks[0]!.wait).toEqual({ event: 'e', timeoutMs: 30_000, onTimeout: 'failed' });
  });

  it('is refused with the key at fault and the limit', () => {
    expect(issuesOf(dag('  - { id: w, wait: { match: {} } }\n'))).toEqual([
      { path: 'tasks[0].wait.event', message: 'missing required key "event"' },
      { path: 'tasks[0].wait.timeout', message: 'missing required key "timeout"' },
    ]);
    expect(issuesOf(dag('  - { id: w, wait: { event: e, timeout: 31d } }\n'))).toEqual([
      { path: 'tasks[0].wait.timeout', message: 'must be at most 30d, got "31d"' },
    ]);
    expect(issuesOf(dag('  - { id: w, wait: { event: e, timeout: 1h, look_back: 8d } }\n'))).toEqual([
      { path: 'tasks[0].wait.look_back', message: 'must be at most 7d, got "8d"' },
    ]);
    expect(issuesOf(dag('  - { id: w, wait: { event: "a b", timeout: 1h } }\n'))[0]).toMatchObject({
      path: 'tasks[0].wait.event',
      message: expect.stringMatching(/^an event name is 1-200 characters/),
    });
    expect(issuesOf(dag('  - { id: w, wait: { event: e, timeout: 1h, on_timeout: ok } }\n'))[0]).toMatchObject({
      path: 'tasks[0].wait.on_timeout',
      message: expect.stringMatching(/^expected one of failed, skipped, success/),
    });
    expect(issuesOf(dag('  - { id: w, wait: { event: e, timeout: 1h, tmeout: 2h } }\n'))[0]).toMatchObject({
      path: 'tasks[0].wait.tmeout',
      message: expect.stringMatching(/^unknown key "tmeout" \(did you mean "timeout"\?\)/),
    });
  });

  it('is one of command, wait and approval, and takes none of the keys of a command', () => {
    expect(issuesOf(dag('  - { id: w, command: x, wait: { event: e, timeout: 1h } }\n'))).toEqual([
      {
        path: 'tasks[0].wait',
        message: 'a task has exactly one of command, wait and approval; this one has command and wait',
      },
    ]);
    expect(issuesOf(dag('  - { id: w, retries: 2, wait: { event: e, timeout: 1h } }\n'))).toEqual([
      { path: 'tasks[0].retries', message: 'only a task with a command may have "retries"; this one has wait' },
    ]);
    expect(issuesOf(dag('  - { id: w }\n'))).toEqual([
      { path: 'tasks[0].command', message: 'missing required key "command"' },
    ]);
  });
});

describe('an approval task', () => {
  it('is read with its role (operator unless told), timeout and message', () => {
    const spec = parseDag(dag('  - { id: ok, approval: { timeout: 24h, message: "Ship it?" } }\n'), 'd.yaml');
    expect(spec.tasks[0]).toMatchObject({
      command: [],
      approval: { role: 'operator', timeoutMs: 86_400_000, message: 'Ship it?', onTimeout: 'failed' },
    });
    expect(
      parseDag(dag('  - { id: ok, approval: { role: admin, timeout: 1h } }\n'), 'd.yaml').tasks[0]!.approval,
    ).toEqual({
      role: 'admin',
      timeoutMs: 3_600_000,
      onTimeout: 'failed',
    });
  });

  it('is refused with the key at fault and the limit: a viewer never approves', () => {
    expect(issuesOf(dag('  - { id: ok, approval: { role: viewer, timeout: 1h } }\n'))[0]).toMatchObject({
      path: 'tasks[0].approval.role',
      message: expect.stringMatching(/^expected one of operator, admin, got "viewer"/),
    });
    expect(issuesOf(dag('  - { id: ok, approval: { role: operator } }\n'))).toEqual([
      { path: 'tasks[0].approval.timeout', message: 'missing required key "timeout"' },
    ]);
    expect(issuesOf(dag(`  - { id: ok, approval: { timeout: 1h, message: "${'x'.repeat(2001)}" } }\n`))).toEqual([
      { path: 'tasks[0].approval.message', message: 'must be at most 2000 characters, got 2001' },
    ]);
    expect(issuesOf(dag('  - { id: ok, approval: { timeout: 0s } }\n'))).toEqual([
      { path: 'tasks[0].approval.timeout', message: 'must be greater than 0, got "0s"' },
    ]);
  });
});

describe('a wait as the planner starts it', () => {
  it("reads $conf values from the run's conf, and a missing one matches nothing", () => {
    expect(resolveMatch({ id: '$conf.order.id', kind: ['a', '$conf.k'], x: 1 }, { order: { id: 42 }, k: 'b' })).toEqual(
      {
        id: 42,
        kind: ['a', 'b'],
        x: 1,
      },
    );
    expect(resolveMatch({ id: '$conf.nope' }, {})).toEqual({ id: [] });
  });

  it('names the event and the match, or the role, in its pending reason', () => {
    const w = waitStart(
      task('w', { command: [], wait: { event: 'e', match: { a: 1 }, timeoutMs: 1000, onTimeout: 'failed' } }),
      {},
    );
    expect(w).toMatchObject({ kind: 'event', event: 'e', reason: 'WAITING_FOR_EVENT:e {"a":1}', lookBackMs: 0 });
    const a = waitStart(
      task('a', { command: [], approval: { role: 'admin', timeoutMs: 1000, onTimeout: 'failed' } }),
      {},
    );
    expect(a).toMatchObject({ kind: 'approval', role: 'admin', reason: 'WAITING_FOR_APPROVAL:admin' });
    expect(waitStart(task('c'), {})).toBeNull();
  });

  it('moves none → waiting instead of scheduled, and the run goes on when it ends', () => {
    const tasks = [
      task('w', { command: [], wait: { event: 'e', timeoutMs: 1000, onTimeout: 'failed' } }),
      task('b', { dependsOn: ['w'] }),
    ];
    const view = (state: TiStateView['state']): TiStateView => ({ state, nextTryAt: null, pendingReason: null });
    const d = advanceRun(
      tasks,
      new Map([
        ['w', view('none')],
        ['b', view('none')],
      ]),
      new Date(),
    );
    expect(d).toMatchObject({ wait: ['w'], schedule: [], outcome: null });
    const waiting = advanceRun(
      tasks,
      new Map([
        ['w', view('waiting')],
        ['b', view('none')],
      ]),
      new Date(),
    );
    expect(waiting).toMatchObject({ wait: [], schedule: [], outcome: null });
    const ended = advanceRun(
      tasks,
      new Map([
        ['w', view('success')],
        ['b', view('none')],
      ]),
      new Date(),
    );
    expect(ended.schedule).toEqual(['b']);
  });
});

describe("a wait's match over its inputs", () => {
  it('reads $inputs.TASK.PATH from the upstream outputs, a missing or non-scalar one matching nothing', () => {
    const inputs = { extract: { batch: { id: 7 }, rows: [1] }, 'a.b': { k: 'v' } };
    const match = { id: '$inputs.extract.batch.id', k: ['x', '$inputs.a.b.k'], rows: '$inputs.extract.rows' };
    expect(bindInputs(match, inputs)).toEqual({ id: 7, k: ['x', 'v'], rows: [] });
    expect(bindInputs({ id: '$inputs.gone.id' }, inputs)).toEqual({ id: [] });
    expect(inputRefs({ a: '$inputs.extract.id', b: ['$conf.x', '$inputs.y'], c: 1 })).toEqual(['extract.id', 'y']);
    expect(refTaskCandidates(['a.b.c'])).toEqual(['a', 'a.b', 'a.b.c']);
  });

  it('names only upstream tasks', () => {
    const source = dag(`  - { id: extract, command: "true" }
  - id: w
    wait: { event: e, match: { id: $inputs.extract.id }, timeout: 1h }
  - id: v
    depends_on: [extract]
    wait: { event: e, match: { id: $inputs.extract.id }, timeout: 1h }
`);
    expect(issuesOf(source)).toEqual([
      {
        path: 'tasks[1].wait.match.id',
        message:
          '"$inputs.extract.id" names task "extract", which is not in depends_on: an input comes from an upstream task',
      },
    ]);
  });
});
