/** parseDag on a DAG's schedule and time zone, and on its task graph (ids, dependencies, cycles). */
import { describe, expect, it } from 'vitest';

import { parseDag } from '../../src/core/dag/parse-dag.js';
import { FILE, dag, issuesOf, tasks } from '../helpers/dag-sources.js';

describe('parseDag: schedule and time zone', () => {
  it.each([
    ['"61 * * * *"', 'invalid cron expression "61 * * * *": Constraint error, got value 61 expected range 0-59'],
    [
      '"* * *"',
      'invalid cron expression "* * *": expected 5 fields (minute hour day-of-month month day-of-week) or 6 (with seconds first), got 3',
    ],
    [
      '"* * * * * * *"',
      'invalid cron expression "* * * * * * *": expected 5 fields (minute hour day-of-month month day-of-week) or 6 (with seconds first), got 7',
    ],
    [
      '""',
      'invalid cron expression "": expected 5 fields (minute hour day-of-month month day-of-week) or 6 (with seconds first), got 0',
    ],
    ['"a b c d e"', 'invalid cron expression "a b c d e": Invalid characters, got value: a'],
    ['"0 0 31 2 *"', 'invalid cron expression "0 0 31 2 *": Invalid explicit day of month definition'],
    ['"H * * * *"', 'invalid cron expression "H * * * *": "H" (hashed) values are not supported'],
    [
      '"@dayly"',
      'expected a cron expression like "*/5 * * * *" or one of @hourly, @daily, @weekly, @monthly, @yearly, got "@dayly" (did you mean "@daily"?)',
    ],
    [
      '"@reboot"',
      'expected a cron expression like "*/5 * * * *" or one of @hourly, @daily, @weekly, @monthly, @yearly, got "@reboot"',
    ],
    ['5', 'expected a cron expression like "*/5 * * * *" or one of @hourly, @daily, @weekly, @monthly, @yearly, got 5'],
  ])('rejects the schedule %s', (value, message) => {
    expect(issuesOf(dag('', `schedule: ${value}\n`))).toEqual([{ path: 'schedule', message }]);
  });

  it('accepts a day name containing H (THU) while rejecting hashed H', () => {
    expect(parseDag(dag('', 'schedule: "0 9 * * THU"\n'), FILE).schedule).toBe('0 9 * * THU');
  });

  it.each([
    ['Mars/Base', '"Mars/Base"'],
    ['Europe/Pariss', '"Europe/Pariss"'],
    ['"+01:00"', '"+01:00"'],
    ['""', '""'],
  ])('rejects the time zone %s', (yamlValue, shown) => {
    expect(issuesOf(dag('', `timezone: ${yamlValue}\n`))).toEqual([
      { path: 'timezone', message: `unknown time zone ${shown}; expected an IANA name like "Europe/Paris"` },
    ]);
  });

  it.each(['UTC', 'Europe/Paris', 'America/New_York', 'Asia/Kolkata'])('accepts the time zone %s', (tz) => {
    expect(parseDag(dag('', `timezone: ${tz}\nschedule: "0 9 * * *"\n`), FILE).timezone).toBe(tz);
  });
});

describe('parseDag: the task graph', () => {
  it('reports a duplicate task id, pointing at the first definition', () => {
    expect(issuesOf(tasks('{id: a, command: x}', '{id: b, command: x}', '{id: a, command: y}'))).toEqual([
      { path: 'tasks[2].id', message: 'duplicate task id "a" (first defined at tasks[0])' },
    ]);
  });

  it('reports an unknown dependency, naming the task, with a suggestion when one is close', () => {
    expect(
      issuesOf(tasks('{id: extract, command: x}', '{id: load, command: x, depends_on: [extarct, Extract, zzz]}')),
    ).toEqual([
      {
        path: 'tasks[1].depends_on[0]',
        message: 'task "load" depends on unknown task "extarct" (did you mean "extract"?)',
      },
      {
        path: 'tasks[1].depends_on[1]',
        message: 'task "load" depends on unknown task "Extract" (did you mean "extract"?)',
      },
      { path: 'tasks[1].depends_on[2]', message: 'task "load" depends on unknown task "zzz"' },
    ]);
  });

  it('reports a task depending on itself, and not also as a cycle', () => {
    expect(issuesOf(tasks('{id: a, command: x, depends_on: [a]}'))).toEqual([
      { path: 'tasks[0].depends_on[0]', message: 'task "a" depends on itself' },
    ]);
  });

  it('reports a duplicate dependency', () => {
    expect(issuesOf(tasks('{id: a, command: x}', '{id: b, command: x, depends_on: [a, a]}'))).toEqual([
      { path: 'tasks[1].depends_on[1]', message: 'duplicate dependency "a"' },
    ]);
  });

  it('does not repeat an invalid task id as an unknown dependency', () => {
    expect(issuesOf(tasks('{id: "a/b", command: x}', '{id: c, command: x, depends_on: ["a/b"]}'))).toEqual([
      {
        path: 'tasks[0].id',
        message: 'expected an id of 1-100 letters, digits, "_", "." or "-", starting with a letter or digit, got "a/b"',
      },
    ]);
  });

  it('rejects a dependency that is not a string', () => {
    expect(issuesOf(tasks('{id: a, command: x, depends_on: [1]}'))).toEqual([
      { path: 'tasks[0].depends_on[0]', message: 'expected a task id, got 1' },
    ]);
  });

  it('names a cycle in run order, starting at the task defined first', () => {
    // b runs after a, c after b, a after c.
    expect(
      issuesOf(
        tasks(
          '{id: a, command: x, depends_on: [c]}',
          '{id: b, command: x, depends_on: [a]}',
          '{id: c, command: x, depends_on: [b]}',
        ),
      ),
    ).toEqual([{ path: 'tasks[0].depends_on[0]', message: 'cycle: a → b → c → a' }]);
    // The same cycle, written in another order, starts at the task defined first.
    expect(
      issuesOf(
        tasks(
          '{id: c, command: x, depends_on: [b]}',
          '{id: a, command: x, depends_on: [c]}',
          '{id: b, command: x, depends_on: [a]}',
        ),
      ),
    ).toEqual([{ path: 'tasks[0].depends_on[0]', message: 'cycle: c → a → b → c' }]);
  });

  it('reports each distinct cycle once', () => {
    const issues = issuesOf(
      tasks(
        // A figure eight through a (a → b → a and a → f → a), and a separate c → d → e → c.
        '{id: a, command: x, depends_on: [b, f]}',
        '{id: b, command: x, depends_on: [a]}',
        '{id: ok, command: x, depends_on: [a]}',
        '{id: c, command: x, depends_on: [e]}',
        '{id: d, command: x, depends_on: [c]}',
        '{id: e, command: x, depends_on: [d]}',
        '{id: f, command: x, depends_on: [a]}',
      ),
    );
    expect(issues).toEqual([
      { path: 'tasks[0].depends_on[0]', message: 'cycle: a → b → a' },
      { path: 'tasks[0].depends_on[1]', message: 'cycle: a → f → a' },
      { path: 'tasks[3].depends_on[0]', message: 'cycle: c → d → e → c' },
    ]);
  });

  it('finds a cycle through 10,000 tasks without overflowing the stack', () => {
    const lines = Array.from(
      { length: 10_000 },
      (_, i) => `{id: t${i}, command: x, depends_on: [t${(i + 9_999) % 10_000}]}`,
    );
    const issues = issuesOf(tasks(...lines));
    expect(issues).toHaveLength(1);
    expect(issues[0]?.path).toBe('tasks[0].depends_on[0]');
    const names = issues[0]?.message.replace(/^cycle: /, '').split(' → ');
    expect(names).toHaveLength(10_001);
    expect(names?.slice(0, 3)).toEqual(['t0', 't1', 't2']);
    expect(names?.slice(-2)).toEqual(['t9999', 't0']);
  });

  it('still reports graph problems alongside field problems', () => {
    expect(
      issuesOf(
        tasks('{id: a, command: x, retries: -1, depends_on: [b]}', '{id: b, command: x, depends_on: [a, nope]}'),
      ),
    ).toEqual([
      { path: 'tasks[0].retries', message: 'expected an integer from 0 to 100, got -1' },
      { path: 'tasks[1].depends_on[1]', message: 'task "b" depends on unknown task "nope"' },
      { path: 'tasks[0].depends_on[0]', message: 'cycle: a → b → a' },
    ]);
  });
});
