import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli } from '../helpers/leoflow-process.js';
import { serverForFile } from '../helpers/server-fixture.js';

/**
 * Notifications out, on Lite with a --notify file: receivers on loopback started by the test. A
 * run that ends notifies the receivers its DAG names (or the file's defaults) once, whatever the
 * receiver answers: one that fails three times and then takes it is delivered once, in four
 * recorded attempts, each with the same notification id.
 */

interface Received {
  headers: IncomingHttpHeaders;
  body: Record<string, unknown>;
}

/** A receiver that answers each POST with the next of `statuses` (the last one from then on). */
function receiver(statuses: number[]): Promise<{ server: Server; url: string; got: Received[] }> {
  const got: Received[] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      got.push({ headers: req.headers, body: JSON.parse(body) as Record<string, unknown> });
      res.writeHead(statuses[Math.min(got.length, statuses.length) - 1]!).end();
    });
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () =>
      resolve({ server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`, got }),
    ),
  );
}

const dir = mkdtempSync(path.join(os.tmpdir(), 'leoflow-notify-'));
const notifyFile = path.join(dir, 'notify.yaml');
let flaky: Awaited<ReturnType<typeof receiver>>;
let slack: Awaited<ReturnType<typeof receiver>>;
/** A receiver that takes each post and never answers (the deliverer's 10 s timeout ends each try). */
let mute: Server;

beforeAll(async () => {
  flaky = await receiver([500, 500, 500, 200]);
  slack = await receiver([200]);
  mute = createServer((req) => req.resume());
  await new Promise<void>((r) => mute.listen(0, '127.0.0.1', r));
  writeFileSync(path.join(dir, 'mute-url'), `http://127.0.0.1:${(mute.address() as AddressInfo).port}/`);
  // A receiver's URL is a secret reference (a Slack webhook URL is its credential): files here.
  writeFileSync(path.join(dir, 'flaky-url'), flaky.url);
  writeFileSync(path.join(dir, 'slack-url'), `${slack.url}\n`);
  writeFileSync(
    notifyFile,
    `receivers:
  - name: ops
    url: { file: ${path.join(dir, 'flaky-url')} }
  - name: team-slack
    url: { file: ${path.join(dir, 'slack-url')} }
    format: slack
  - name: mute
    url: { file: ${path.join(dir, 'mute-url')} }
defaults:
  - on: [success]
    to: team-slack
`,
  );
}, 10_000);
// After the receivers are up: the server reads their URLs at its start.
const f = serverForFile({ args: () => ['--notify', notifyFile], tmpPrefix: 'leoflow-notifications-' });

afterAll(async () => {
  mute?.closeAllConnections();
  await new Promise((done) => mute?.close(done));
  for (const r of [flaky, slack]) await new Promise((done) => r?.server.close(done));
  rmSync(dir, { recursive: true, force: true });
});

async function runToEnd(dagId: string): Promise<string> {
  const { run } = await f.api.workflow.triggerRun({ dagId });
  for (const until = Date.now() + 30_000; Date.now() < until;) {
    const r = (await f.api.workflow.getRun({ runId: run!.runId })).run!;
    if (r.endedAt) return r.runId;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`run of ${dagId} did not end`);
}

async function runToEndOf(runId: string): Promise<void> {
  for (const until = Date.now() + 30_000; Date.now() < until;) {
    if ((await f.api.workflow.getRun({ runId })).run!.endedAt) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`run ${runId} did not end`);
}

async function waitFor<T>(what: string, get: () => Promise<T | undefined>, ms = 30_000): Promise<T> {
  for (const until = Date.now() + ms; Date.now() < until;) {
    const v = await get();
    if (v !== undefined) return v;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out waiting for ${what}`);
}

describe('notifications', () => {
  it('tell a failed run to the receiver its DAG names once, in four attempts when it fails three times', async () => {
    await f.api.workflow.applyDag({
      source: `dag_id: breaks
notify:
  - on: [failed]
    to: ops
tasks:
  - id: extract
    command: ["true"]
  - id: load
    command: ["sh", "-c", "echo 'disk full' >&2; exit 3"]
    depends_on: [extract]
`,
      filename: 'breaks.yaml',
    });
    const runId = await runToEnd('breaks');
    const listed = await waitFor('the delivery', async () => {
      const out = await cli(f.server.url, ['notifications', 'list', '--dag', 'breaks', '-o', 'json']);
      const rows = JSON.parse(out.stdout) as Record<string, unknown>[];
      return rows[0]?.state === 'delivered' ? rows : undefined;
    });
    expect(listed).toHaveLength(1);
    expect(listed[0]).toMatchObject({ run_id: runId, kind: 'failed', receiver: 'ops', attempts: 4, last_error: null });
    expect(flaky.got).toHaveLength(4);
    const ids = new Set(flaky.got.map((g) => g.headers['leoflow-notification-id']));
    expect(ids).toEqual(new Set([listed[0]!.id]));
    expect(flaky.got[3]!.body).toMatchObject({
      kind: 'failed',
      dag_id: 'breaks',
      run_id: runId,
      state: 'failed',
      failed_tasks: [{ task_id: 'load', state: 'failed', try_number: 1 }],
    });
    expect(flaky.got[3]!.body.text).toMatch(new RegExp(`^Run ${runId} of breaks \\(.+\\) failed: load \\(try 1: `));
    const attempts = await f.db.sql<{ status: number }[]>`
      select status from notification_attempts order by id`;
    expect(attempts.map((a) => a.status)).toEqual([500, 500, 500, 200]);
    // The success default is not for a DAG that names its own rules.
    expect(slack.got).toHaveLength(0);
  });

  it("tell a DAG's success by the file's defaults, in Slack's format; `notify: []` opts out", async () => {
    await f.api.workflow.applyDag({
      source: 'dag_id: fine\ntasks: [{ id: t, command: ["true"] }]\n',
      filename: 'fine.yaml',
    });
    await f.api.workflow.applyDag({
      source: 'dag_id: quiet\nnotify: []\ntasks: [{ id: t, command: ["true"] }]\n',
      filename: 'quiet.yaml',
    });
    const runId = await runToEnd('fine');
    await runToEnd('quiet');
    await waitFor('the Slack delivery', async () => (slack.got.length > 0 ? true : undefined));
    expect(slack.got[0]!.body).toEqual({
      text: expect.stringMatching(new RegExp(`^Run ${runId} of fine .* succeeded$`)),
    });
    const rows = await f.db.sql<{ dag_id: string; state: string }[]>`
      select dag_id, state from notifications where dag_id in ('fine', 'quiet')`;
    expect(rows).toEqual([{ dag_id: 'fine', state: 'delivered' }]);
  });

  it('mark a run that has not ended by its deadline missed once, with an event and a notification; one that ends in time is not told', async () => {
    await f.api.workflow.applyDag({
      source: `dag_id: late
deadline: 1s
notify: [{ on: [deadline_missed], to: ops }]
tasks: [{ id: slow, command: ["sleep", "3"] }]
`,
      filename: 'late.yaml',
    });
    await f.api.workflow.applyDag({
      source:
        'dag_id: prompt\ndeadline: 1h\nnotify: [{ on: [deadline_missed], to: ops }]\ntasks: [{ id: t, command: ["true"] }]\n',
      filename: 'prompt.yaml',
    });
    const before = flaky.got.length;
    const late = (await f.api.workflow.triggerRun({ dagId: 'late' })).run!.runId;
    const missed = await waitFor('the miss', async () => {
      const r = (await f.api.workflow.getRun({ runId: late })).run!;
      return r.deadlineState === 'missed' ? r : undefined;
    });
    expect(missed.endedAt).toBeUndefined();
    const shown = await cli(f.server.url, ['run', 'show', late]);
    expect(shown.stdout).toMatch(/^deadline .+: missed$/m);
    await waitFor('the delivery', async () => (flaky.got.length > before ? true : undefined));
    expect(flaky.got.at(-1)!.body).toMatchObject({ kind: 'deadline_missed', run_id: late, state: 'running' });
    expect(flaky.got.at(-1)!.body.text).toMatch(new RegExp(`^Run ${late} of late .* missed its deadline \\(`));
    await runToEnd('prompt');
    // The run ends after its deadline: still one miss, one event, one notification.
    await waitFor('the late run to end', async () =>
      (await f.api.workflow.getRun({ runId: late })).run!.endedAt ? true : undefined,
    );
    // WatchRun streams it with the run's other events.
    const kinds: string[] = [];
    for await (const res of f.api.workflow.watchRun({ runId: late, afterSeq: '0', follow: false }))
      kinds.push(...res.events.map((e) => e.kind));
    expect(kinds.filter((k) => k === 'run.deadline_missed')).toHaveLength(1);
    const events = await f.db.sql<{ run_id: string }[]>`
      select run_id::text from events where kind = 'run.deadline_missed'`;
    expect(events).toEqual([{ run_id: late }]);
    const told = await f.db.sql<{ kind: string; n: number }[]>`
      select kind, count(*)::int as n from notifications where dag_id in ('late', 'prompt') group by kind`;
    expect(told).toEqual([{ kind: 'deadline_missed', n: 1 }]);
    expect(flaky.got.length).toBe(before + 1);
  });

  it('mark a task not ended by its deadline, counted from its first scheduling, missed once; told with the task', async () => {
    await f.api.workflow.applyDag({
      source: `dag_id: late_task
notify: [{ on: [deadline_missed], to: ops }]
tasks:
  - { id: first, command: ["sleep", "2"] }
  # Due 1.5 s after it is scheduled, once first has ended: met (from the run's start it would miss).
  - { id: after, command: ["true"], depends_on: [first], deadline: 1500ms }
  - { id: slow, command: ["sleep", "3"], deadline: 1s }
`,
      filename: 'late_task.yaml',
    });
    const before = flaky.got.length;
    const runId = (await f.api.workflow.triggerRun({ dagId: 'late_task' })).run!.runId;
    const state = async (task: string) =>
      (await f.api.workflow.getRun({ runId })).taskInstances.find((t) => t.taskId === task)!;
    const slow = await waitFor('the miss', async () => {
      const t = await state('slow');
      return t.deadlineState === 'missed' ? t : undefined;
    });
    expect(slow.endedAt).toBeUndefined();
    await waitFor('the delivery', async () => (flaky.got.length > before ? true : undefined));
    expect(flaky.got.at(-1)!.body).toMatchObject({ kind: 'deadline_missed', run_id: runId, task_id: 'slow' });
    expect(flaky.got.at(-1)!.body.text).toMatch(
      new RegExp(`^Run ${runId} of late_task .*: task slow missed its deadline \\(`),
    );
    await runToEndOf(runId);
    await waitFor('the met mark', async () => ((await state('after')).deadlineState === 'met' ? true : undefined));
    expect((await state('first')).deadlineAt).toBeUndefined();
    const shown = await cli(f.server.url, ['run', 'show', runId]);
    expect(shown.stdout).toMatch(/^task slow deadline .+: missed$/m);
    expect(shown.stdout).toMatch(/^task after deadline .+: met$/m);
    const kinds: string[] = [];
    for await (const res of f.api.workflow.watchRun({ runId, afterSeq: '0', follow: false }))
      kinds.push(...res.events.filter((e) => e.kind === 'task.deadline_missed').map((e) => e.payloadJson));
    expect(kinds.map((k) => (JSON.parse(k) as { task_id: string }).task_id)).toEqual(['slow']);
    const told = await f.db.sql<{ kind: string; task_id: string }[]>`
      select kind, task_id from notifications where dag_id = 'late_task'`;
    expect(told).toEqual([{ kind: 'deadline_missed', task_id: 'slow' }]);
    expect(flaky.got.length).toBe(before + 1);
  });

  it('ask for an approval once per waiting approval task, saying how to approve it', async () => {
    await f.api.workflow.applyDag({
      source: `dag_id: gated
notify: [{ on: [approval_requested], to: team-slack }]
tasks:
  - id: build
    command: ["true"]
  - id: sign_off
    depends_on: [build]
    approval: { role: operator, timeout: 1h, message: "Ship build 7?" }
`,
      filename: 'gated.yaml',
    });
    const before = slack.got.length;
    const runId = (await f.api.workflow.triggerRun({ dagId: 'gated' })).run!.runId;
    await waitFor('the request', async () => (slack.got.length > before ? true : undefined));
    expect(slack.got.at(-1)!.body).toEqual({
      text: expect.stringMatching(
        new RegExp(
          `^Run ${runId} of gated .* asks a token of role operator to approve task sign_off: Ship build 7\\? ` +
            `\\(leoflow run approve ${runId} sign_off\\)$`,
        ),
      ),
    });
    const approved = await cli(f.server.url, ['run', 'approve', runId, 'sign_off']);
    expect(approved.code, approved.stderr).toBe(0);
    await runToEndOf(runId);
    const listed = JSON.parse(
      (await cli(f.server.url, ['notifications', 'list', '--dag', 'gated', '-o', 'json'])).stdout,
    ) as Record<string, unknown>[];
    expect(listed).toMatchObject([{ kind: 'approval_requested', task_id: 'sign_off', state: 'delivered' }]);
  });

  it('refuses a state that is not one, naming them', async () => {
    const out = await cli(f.server.url, ['notifications', 'list', '--state', 'sent']);
    expect(out.code).not.toBe(0);
    expect(out.stderr).toContain('state: must be one of pending, delivered, failed, got "sent"');
  });

  // Last: its posts hang the receiver's deliveries (each try to its 10 s timeout).
  it('never slow the runs when a receiver does not answer', async () => {
    await f.api.workflow.applyDag({
      source: 'dag_id: told_to_mute\nnotify: [{ on: [success], to: mute }]\ntasks: [{ id: t, command: ["true"] }]\n',
      filename: 'told_to_mute.yaml',
    });
    const t0 = Date.now();
    for (let i = 0; i < 5; i++) await runToEnd('told_to_mute');
    const runsMs = Date.now() - t0;
    const [pending] = await f.db.sql<{ n: number }[]>`
      select count(*)::int as n from notifications where dag_id = 'told_to_mute' and state = 'pending'`;
    // Five runs one after another, each told to a receiver that holds every post 10 s: none waited.
    expect(pending!.n).toBe(5);
    expect(runsMs).toBeLessThan(10_000);
  });
});
