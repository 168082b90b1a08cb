import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { DagValidationError } from '../../src/core/dag-spec.js';
import { parseDag } from '../../src/core/dag/parse-dag.js';
import { readNotifyFile } from '../../src/server/config/read-notify-file.js';
import { notificationBody } from '../../src/server/notify/notification-body.js';
import type { DueNotification } from '../../src/db/notify-out/take-due-notifications.js';

const dag = (notify: string) => `dag_id: d\nnotify: ${notify}\ntasks: [{ id: a, command: x }]\n`;
const issues = (source: string) => {
  try {
    parseDag(source, 'd.yaml');
    return [];
  } catch (err) {
    if (!(err instanceof DagValidationError)) throw err;
    return err.issues.map((i) => `${i.path}: ${i.message}`);
  }
};

describe("a DAG's notify rules", () => {
  it('are kept as written, and `[]` is kept (it opts out of the defaults)', () => {
    const spec = parseDag(dag('[{ on: [failed, success], to: ops }, { on: failed, to: pager.1 }]'), 'd.yaml');
    expect(spec.notify).toEqual([
      { on: ['failed', 'success'], to: 'ops' },
      { on: ['failed'], to: 'pager.1' },
    ]);
    expect(parseDag(dag('[]'), 'd.yaml').notify).toEqual([]);
  });

  it('name what is wrong and the limit', () => {
    expect(issues(dag('[{ on: [failure], to: ops }]'))).toEqual([
      'notify[0].on[0]: expected one of failed, success, deadline_missed, approval_requested, got "failure"',
    ]);
    expect(issues(dag('[{ on: [failed] }]'))).toEqual(['notify[0].to: missing required key "to"']);
    expect(issues(dag('[{ on: [], to: "-x" }]'))).toEqual([
      'notify[0].on: expected a non-empty list of failed, success, deadline_missed, approval_requested, got an empty list',
      `notify[0].to: a receiver name is 1-100 letters, digits, '_', '.' or '-', starting with a letter or digit, got "-x"`,
    ]);
    const many = `[${Array.from({ length: 21 }, () => '{ on: [failed], to: r }').join(', ')}]`;
    expect(issues(dag(many))).toEqual(['notify: at most 20 notify rules, got 21']);
  });
});

describe('the --notify file', () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'leoflow-notify-unit-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const file = (text: string) => {
    const p = path.join(dir, `n-${Math.random()}.yaml`);
    writeFileSync(p, text);
    return p;
  };

  it('reads receivers by secret reference, and defaults that name them', () => {
    writeFileSync(path.join(dir, 'url'), 'https://hooks.slack.com/services/T/B/x\n');
    const p = file(`receivers:
  - { name: ops, url: { file: url }, format: slack }
  - { name: pager, url: { env: TEST_PAGER_URL } }
defaults: [{ on: [failed], to: ops }]
`);
    process.env.TEST_PAGER_URL = 'http://127.0.0.1:9/p';
    const s = readNotifyFile(p, dir);
    expect([...s.receivers.values()].map((r) => [r.name, r.url.href, r.format])).toEqual([
      ['ops', 'https://hooks.slack.com/services/T/B/x', 'slack'],
      ['pager', 'http://127.0.0.1:9/p', 'json'],
    ]);
    expect(s.defaults).toEqual([{ on: ['failed'], to: 'ops' }]);
  });

  it('refuses at start what would fail at delivery, naming the field, never the URL', () => {
    process.env.TEST_BAD_URL = 'not a url with a secret in it';
    const cases: [string, string][] = [
      ['receivers: [{ name: a, url: "https://x" }]', 'receivers[0].url must be { env: NAME } or { file: PATH }'],
      [
        'receivers: [{ name: a, url: { env: TEST_BAD_URL } }]',
        'receivers[0].url: the value is not a URL (its length: 29)',
      ],
      ['receivers: [{ name: a, url: { env: TEST_UNSET_URL } }]', 'the environment variable TEST_UNSET_URL is not set'],
      ['receivers: []\ndefaults: [{ on: [failed], to: nobody }]', 'defaults[0].to: no receiver "nobody"'],
      ['receivers: [{ name: a, url: { env: TEST_PAGER_URL }, format: xml }]', 'format must be one of json, slack'],
      ['receiver: []', 'expected a mapping with a list `receivers`'],
    ];
    for (const [text, message] of cases) expect(() => readNotifyFile(file(text), dir), text).toThrow(message);
  });
});

describe('the body', () => {
  const n: DueNotification = {
    id: '7',
    run_id: '42',
    dag_id: 'etl',
    kind: 'failed',
    receiver: 'ops',
    task_id: '',
    approval: null,
    attempt: 1,
    run_key: 'manual__2026-11-29T00:00:00Z',
    run_state: 'failed',
    logical_date: new Date('2026-11-29T00:00:00Z'),
    started_at: null,
    ended_at: null,
    deadline_at: null,
    failed_tasks: [
      { task_id: 'load', state: 'failed', try_number: 3, error: 'exit code 1\nmore' },
      { task_id: 'report', state: 'upstream_failed', try_number: 0, error: null },
    ],
  };

  it('says in one line which tasks failed, and Slack gets only the line', () => {
    const text = 'Run 42 of etl (manual__2026-11-29T00:00:00Z) failed: load (try 3: exit code 1)';
    expect(notificationBody(n, 'slack')).toEqual({ text });
    expect(notificationBody(n, 'json')).toMatchObject({ id: '7', kind: 'failed', failed_tasks: n.failed_tasks, text });
  });

  it("names the task of a task's missed deadline, with the task's deadline", () => {
    const late = { ...n, kind: 'deadline_missed', task_id: 'load', run_state: 'running' };
    const at = new Date('2026-11-29T01:00:00Z');
    expect(notificationBody({ ...late, deadline_at: at }, 'json')).toMatchObject({
      task_id: 'load',
      deadline_at: at.toISOString(),
      text: 'Run 42 of etl (manual__2026-11-29T00:00:00Z): task load missed its deadline (2026-11-29T01:00:00.000Z)',
    });
  });
});

describe("a task's deadline", () => {
  const task = (deadline: string) => `dag_id: d\ntasks: [{ id: a, command: x, deadline: ${deadline} }]\n`;
  it('is read as ms, and must be more than 0 and at most 30d', () => {
    expect(parseDag(task('90s'), 'd.yaml').tasks[0]!.deadlineMs).toBe(90_000);
    expect(parseDag(dag('[]'), 'd.yaml').tasks[0]!.deadlineMs).toBeUndefined();
    expect(issues(task('0s'))).toEqual(['tasks[0].deadline: must be more than 0 and at most 30d, got "0s"']);
    expect(issues(task('31d'))).toEqual(['tasks[0].deadline: must be more than 0 and at most 30d, got "31d"']);
  });
});
