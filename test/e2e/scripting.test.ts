import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { timestampFromDate } from '@bufbuild/protobuf/wkt';
import { ConnectError } from '@connectrpc/connect';
import { beforeAll, describe, expect, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import type { WatchRunsResponse } from '../../src/gen/leoflow/v1/workflow_pb.js';
import { cli, scratchDir, startServer, waitFor } from '../helpers/leoflow-process.js';
import { serverForFile } from '../helpers/server-fixture.js';
import { createTestDatabase } from '../helpers/test-database.js';
import { runIdOf } from '../helpers/run-show.js';

/**
 * What a script reads from the CLI, against a real Lite server: `run show` with where and when
 * each task ran (table and JSON), `logs` with each line's time and as JSON, `run list --state`,
 * and who did each write (the actor, in the server's log and in the write's events).
 */

const dir = scratchDir('leoflow-scripting-');
const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

async function ok(args: string[], env: Record<string, string> = {}, url = f.server.url): Promise<string> {
  const r = await cli(url, args, { env });
  expect(r.code, `leoflow ${args.join(' ')}: ${r.stderr}`).toBe(0);
  return r.stdout;
}

/** Every event of a run, as `run watch -o json` prints them. */
async function eventsOf(
  runId: string,
  url = f.server.url,
  env: Record<string, string> = {},
  more: string[] = [],
): Promise<Record<string, unknown>[]> {
  return (await ok(['run', 'watch', runId, '-o', 'json', ...more], env, url))
    .split('\n')
    .filter((l) => l.trim() !== '') // none at all when nothing happened after `--after`
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

const f = serverForFile();

beforeAll(async () => {
  await writeFile(
    path.join(dir, 'scripted.yaml'),
    'dag_id: scripted\ntasks:\n  - id: a\n    command: ["sh", "-c", "echo out; echo err >&2"]\n  - id: b\n    depends_on: [a]\n    command: ["sh", "-c", "sleep 0.2; echo from b"]\n',
  );
  await writeFile(
    path.join(dir, 'failing.yaml'),
    'dag_id: failing\ntasks:\n  - id: boom\n    command: ["sh", "-c", "exit 3"]\n',
  );
  await ok(['dag', 'apply', dir]);
}, 60_000);

describe('run show', () => {
  it("shows each task's agent, start and end in the table, and the run's traceparent, times and agents in -o json", async () => {
    const runId = runIdOf(await ok(['run', 'trigger', 'scripted', '--wait']));
    const table = await ok(['run', 'show', runId]);
    const [header, ...rows] = table.split('\n\n')[1]!.trim().split('\n');
    expect(header).toMatch(/^TASK\s+STATE\s+TRY\s+EXIT\s+AGENT\s+STARTED\s+ENDED\s+DURATION\s+REASON \/ ERROR$/);
    const stamp = '\\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\d\\.\\d{3}';
    for (const task of ['a', 'b']) {
      expect(rows.find((r) => r.startsWith(`${task} `))).toMatch(
        new RegExp(`^${task}\\s+success\\s+1/1\\s+0\\s+\\S+\\s+${stamp}\\s+${stamp}\\s+\\S+$`),
      );
    }

    const shown = JSON.parse(await ok(['run', 'show', runId, '-o', 'json'])) as Record<string, unknown> & {
      task_instances: Record<string, unknown>[];
    };
    expect(shown).toMatchObject({
      run_id: runId,
      dag_id: 'scripted',
      state: 'success',
      run_type: 'manual',
      dag_version: 1,
      conf: {},
    });
    expect(shown.traceparent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$/);
    expect(table).toContain(`\ntraceparent ${String(shown.traceparent)}\n`);
    expect(shown.triggered_by).toEqual({ actor: 'local', peer: expect.stringMatching(/^127\.0\.0\.1:\d+$/) });
    expect(table).toMatch(/^triggered by local from 127\.0\.0\.1:\d+$/m);
    for (const k of ['logical_date', 'created_at', 'started_at', 'ended_at']) expect(shown[k], k).toMatch(ISO);
    expect(Date.parse(String(shown.ended_at))).toBeGreaterThanOrEqual(Date.parse(String(shown.started_at)));
    const [a, b] = ['a', 'b'].map((id) => shown.task_instances.find((t) => t.task_id === id)!);
    for (const t of [a!, b!]) {
      expect(t).toMatchObject({
        state: 'success',
        try_number: 1,
        max_tries: 1,
        exit_code: 0,
        error: null,
        pending_reason: null,
        executor: 'subprocess',
      });
      for (const k of ['queued_at', 'started_at', 'ended_at']) expect(t[k], `${String(t.task_id)}.${k}`).toMatch(ISO);
      expect(t).toHaveProperty('agent_id');
      // The table's AGENT column shows the same value.
      expect(rows.find((r) => r.startsWith(`${String(t.task_id)} `))).toContain(` ${String(t.agent_id ?? '-')} `);
    }
    // b ran after a ended, and took its 0.2 s.
    expect(Date.parse(String(b!.started_at))).toBeGreaterThanOrEqual(Date.parse(String(a!.ended_at)));
    expect(Date.parse(String(b!.ended_at)) - Date.parse(String(b!.started_at))).toBeGreaterThanOrEqual(200);
  });
});

describe('logs', () => {
  it("prints each line's time with --timestamps, and one JSON object a line with -o json", async () => {
    const before = Date.now();
    const runId = runIdOf(await ok(['run', 'trigger', 'scripted', '--wait']));
    const after = Date.now();

    const text = (await ok(['logs', runId, '--task', 'a', '--timestamps'])).trim().split('\n');
    expect(text).toContainEqual(expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z \[a #1\] out$/));
    expect(text).toContainEqual(expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z \[a #1 stderr\] err$/));
    // Without the flag, the lines read as before.
    expect(await ok(['logs', runId, '--task', 'a'])).toMatch(/^\[a #1\] out$/m);

    const lines = (await ok(['logs', runId, '-o', 'json']))
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines).toContainEqual(expect.objectContaining({ task: 'a', try: 1, stream: 'stdout', line: 'out' }));
    expect(lines).toContainEqual(expect.objectContaining({ task: 'a', try: 1, stream: 'stderr', line: 'err' }));
    expect(lines).toContainEqual(expect.objectContaining({ task: 'b', try: 1, stream: 'stdout', line: 'from b' }));
    expect(lines).toContainEqual(
      expect.objectContaining({ task: 'a', try: 1, stream: 'system', line: 'exited with code 0' }),
    );
    for (const l of lines) {
      expect(Object.keys(l).sort()).toEqual(['at', 'line', 'seq', 'stream', 'task', 'ti_id', 'try']);
      expect(l.at).toMatch(ISO);
      expect(Date.parse(String(l.at))).toBeGreaterThanOrEqual(before - 1000);
      expect(Date.parse(String(l.at))).toBeLessThanOrEqual(after + 1000);
    }
    // b's line was written after a's, 0.2 s into b.
    const at = (task: string, line: string) =>
      Date.parse(String(lines.find((l) => l.task === task && l.line === line)!.at));
    expect(at('b', 'from b')).toBeGreaterThan(at('a', 'out'));

    const bad = await cli(f.server.url, ['logs', runId, '-o', 'yaml']);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toBe('leoflow: -o/--output must be text or json, got "yaml"\n');
  });
});

describe('run list --state', () => {
  it('lists only runs in the states given, filtered by the server', async () => {
    const failed = runIdOf((await cli(f.server.url, ['run', 'trigger', 'failing', '--wait'])).stdout);
    const list = async (state: string) =>
      JSON.parse(await ok(['run', 'list', '--state', state, '--limit', '1000', '-o', 'json'])) as {
        run_id: string;
        state: string;
      }[];
    const onlyFailed = await list('failed');
    expect(onlyFailed.map((r) => r.run_id)).toEqual([failed]);
    const succeeded = await list('success');
    expect(succeeded.length).toBeGreaterThanOrEqual(2);
    expect(new Set(succeeded.map((r) => r.state))).toEqual(new Set(['success']));
    const both = await list('success,FAILED');
    expect(both).toHaveLength(succeeded.length + 1);
    expect(await list('cancelled')).toEqual([]);
    const table = await ok(['run', 'list', '--state', 'failed']);
    expect(table.trim().split('\n')).toHaveLength(2);
    expect(table).toMatch(new RegExp(`^${failed}\\s+failing\\s+failed\\s`, 'm'));
  });

  it('refuses a state that is not one, naming the states (before anything is sent), and so does the server', async () => {
    const r = await cli(f.server.url, ['run', 'list', '--state', 'succeeded']);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe(
      'leoflow: --state: "succeeded" is not a run state; give one of queued, running, success, failed, cancelled (several comma-separated)\n',
    );
    // Another client sends a number the server does not know, or UNSPECIFIED.
    for (const bad of [0, 42]) {
      const err = await createClients(f.server.url)
        .workflow.listRuns({ states: [bad] })
        .then(
          () => null,
          (e: unknown) => ConnectError.from(e),
        );
      expect(err?.code, String(bad)).toBe(3);
      expect(err?.rawMessage).toBe(
        `states: holds ${bad}, which is no run state: give 1 (queued), 2 (running), 3 (success), 4 (failed), 5 (cancelled)`,
      );
    }
  });
});

describe('the actor of every write', () => {
  it("is `local` with the caller's address on open Lite, in the server's log and in the write's events", async () => {
    const runId = runIdOf(await ok(['run', 'trigger', 'scripted', '--wait']));
    await ok(['run', 'clear', runId, 'a', '--downstream']);
    await waitFor(
      'the cleared run ends',
      async () => JSON.parse(await ok(['run', 'show', runId, '-o', 'json'])).state === 'success',
      20_000,
    );
    // A watch ends at the run's end: the clear's events are read on from there, as a watcher resumes.
    const first = await eventsOf(runId);
    const events = [...first, ...(await eventsOf(runId, f.server.url, {}, ['--after', String(first.at(-1)!.seq)]))];
    const peer = /^127\.0\.0\.1:\d+$/;
    const queued = events.find((e) => e.kind === 'run.state' && e.to === 'queued')!;
    expect(queued).toMatchObject({ actor: 'local' });
    expect(queued.peer).toMatch(peer);
    const cleared = events.filter((e) => e.reason === 'cleared');
    expect(cleared.map((e) => [e.kind, e.task_id ?? null, e.actor])).toEqual([
      ['ti.state', 'a', 'local'],
      ['ti.state', 'b', 'local'],
      ['run.state', 'a', 'local'],
    ]);
    // What the scheduler did on its own carries no actor.
    expect(events.filter((e) => e.to === 'running' && e.kind === 'ti.state').every((e) => e.actor === undefined)).toBe(
      true,
    );

    const logged = (msg: string) => f.server.logs.filter((l) => String(l.msg) === msg && l.runId === runId);
    // The server's stdout reaches this process on its own path, behind or ahead of the answers.
    await waitFor(
      'both log lines',
      async () => logged('run triggered').length + logged('cleared a; run re-opened').length >= 2,
      5_000,
    );
    expect(logged('run triggered')).toEqual([
      expect.objectContaining({ actor: 'local', peer: expect.stringMatching(peer) }),
    ]);
    expect(logged('cleared a; run re-opened')).toEqual([
      expect.objectContaining({ actor: 'local', peer: expect.stringMatching(peer) }),
    ]);
  });

  it('records cancels, pauses and applies with their actor', async () => {
    await writeFile(
      path.join(dir, 'slow.yaml'),
      'dag_id: slow\ntasks:\n  - id: wait\n    command: ["sleep", "30"]\n  - id: after\n    depends_on: [wait]\n    command: ["true"]\n',
    );
    await ok(['dag', 'apply', path.join(dir, 'slow.yaml')]);
    const one = runIdOf(await ok(['run', 'trigger', 'slow']));
    await ok(['run', 'cancel', one, '--task', 'after']);
    await ok(['run', 'cancel', one]);
    const events = await eventsOf(one);
    expect(events.find((e) => e.kind === 'ti.state' && e.task_id === 'after' && e.to === 'cancelled')).toMatchObject({
      actor: 'local',
      reason: 'cancelled by user',
    });
    expect(events.find((e) => e.kind === 'ti.state' && e.task_id === 'wait' && e.to === 'cancelled')).toMatchObject({
      actor: 'local',
    });
    expect(events.find((e) => e.kind === 'run.state' && e.to === 'cancelled')).toMatchObject({ actor: 'local' });
    await ok(['dag', 'pause', 'slow']);
    const withActor = (msg: string) =>
      f.server.logs.filter((l) => String(l.msg) === msg && l.actor === 'local' && typeof l.peer === 'string');
    expect(withActor('run cancelled').some((l) => l.runId === one)).toBe(true);
    expect(withActor('task after cancelled').some((l) => l.runId === one)).toBe(true);
    expect(withActor('paused DAG slow')).toHaveLength(1);
    expect(withActor('applied DAG').some((l) => l.dagId === 'slow')).toBe(true);
    const watch = createClients(f.server.url)
      .workflow.watchRuns({ dagId: 'slow' }, { signal: AbortSignal.timeout(10_000) })
      [Symbol.asyncIterator]();
    const first = (await watch.next()).value as WatchRunsResponse;
    await watch.return?.();
    const applied = first.events[0]!;
    expect([applied.kind, JSON.parse(applied.payloadJson)]).toEqual([
      'dag.applied',
      { dag_id: 'slow', version: 1, actor: 'local', peer: expect.stringMatching(/^127\.0\.0\.1:\d+$/) },
    ]);
  });
});

describe('the actor behind a token', () => {
  it("is the token's id, in the log and in the events, for runs, tokens, cleans and deletes", async () => {
    const admin = 'lf_scripting_admin_token_for_the_actor_test_0000';
    const own = await createTestDatabase();
    const pro = await startServer({
      env: {
        DATABASE_URL: own.url,
        LEOFLOW_INSECURE: undefined,
        LEOFLOW_TOKEN: undefined,
        LEOFLOW_BOOTSTRAP_ADMIN_TOKEN: admin,
      },
      args: ['--edition', 'pro', '--executor', 'subprocess'],
    });
    try {
      const env = { LEOFLOW_TOKEN: admin };
      const operator = await ok(['token', 'create', '--role', 'operator', '--name', 'ci', '-o', 'json'], env, pro.url);
      const { id, secret } = JSON.parse(operator) as { id: string; secret: string };
      await ok(['dag', 'apply', path.join(dir, 'failing.yaml')], env, pro.url);
      const runId = runIdOf(await ok(['run', 'trigger', 'failing'], { LEOFLOW_TOKEN: secret }, pro.url));
      const queued = (await eventsOf(runId, pro.url, env)).find((e) => e.kind === 'run.state' && e.to === 'queued')!;
      expect(queued).toMatchObject({ actor: id });
      expect(JSON.parse(await ok(['run', 'show', runId, '-o', 'json'], env, pro.url)).triggered_by).toMatchObject({
        actor: id,
      });
      expect(pro.logs.find((l) => l.msg === 'run triggered' && l.runId === runId)).toMatchObject({
        actor: id,
        peer: expect.stringMatching(/^127\.0\.0\.1:\d+$/),
      });
      expect(pro.logs.find((l) => l.msg === `API token ${id} created`)).toMatchObject({ actor: 'bootstrap-admin' });
      // The admin's other writes: a revoke, a clean of the history, a DAG deleted.
      const root = createClients(pro.url, null, admin);
      await root.tokens.revokeToken({ id });
      await waitFor('the run ends', async () => (await root.workflow.getRun({ runId })).run!.state >= 3, 20_000);
      await root.workflow.cleanHistory({ before: timestampFromDate(new Date()), keepLast: 0 });
      await root.workflow.deleteDag({ dagId: 'failing' });
      for (const msg of [
        `API token ${id} revoked`,
        'removed finished runs and their history (db clean)',
        'deleted DAG failing and its history',
      ]) {
        // The server's stdout reaches this process on its own path, behind or ahead of the answer.
        const line = await waitFor(msg, async () => pro.logs.find((l) => l.msg === msg), 5_000);
        expect(line, msg).toMatchObject({
          actor: 'bootstrap-admin',
          peer: expect.stringMatching(/^127\.0\.0\.1:\d+$/),
        });
      }
    } finally {
      await pro.stop();
      await own.drop();
    }
  }, 60_000);
});
