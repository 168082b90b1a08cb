import { createHmac } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RunState, TaskState } from '../../src/gen/leoflow/v1/types_pb.js';
import { waitFor } from '../helpers/leoflow-process.js';
import { serverForFile } from '../helpers/server-fixture.js';

/**
 * Webhooks on Lite with its defaults plus a hooks file: a signed delivery becomes an event and
 * starts the runs it triggers; a bad signature, a redelivery, an unknown hook, a body too big and
 * a GET are each answered with their 4xx (or the first delivery's answer) and write nothing.
 */

const KEY = 'a-webhook-key-of-32-random-chars!';
const dir = mkdtempSync(path.join(os.tmpdir(), 'leoflow-hooks-'));
const hooksFile = path.join(dir, 'hooks.yaml');
writeFileSync(
  hooksFile,
  `hooks:
  - name: github
    event: repo.push
    secret: { env: TEST_HOOK_KEY }
    key_header: X-GitHub-Delivery
  - name: plain
`,
);
const f = serverForFile({ args: ['--hooks', hooksFile], env: { TEST_HOOK_KEY: KEY }, tmpPrefix: 'leoflow-webhooks-' });

afterAll(() => rmSync(dir, { recursive: true, force: true }));

beforeAll(async () => {
  await f.api.workflow.applyDag({
    source:
      'dag_id: on-push\ntriggers: [{ event: repo.push, match: { ref: refs/heads/main } }]\ntasks: [{ id: t, command: ["true"] }]\n',
    filename: 'on-push.yaml',
  });
});

const sign = (body: string, key = KEY) => `sha256=${createHmac('sha256', key).update(body).digest('hex')}`;

async function post(
  hook: string,
  body: string,
  headers: Record<string, string> = {},
  method = 'POST',
): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${f.server.url}/hooks/${hook}`, {
    method,
    headers: { 'content-type': 'application/json', ...headers },
    ...(method === 'POST' ? { body } : {}),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

async function stored(): Promise<{ events: number; runs: number }> {
  const [r] = await f.db.sql<{ events: number; runs: number }[]>`
    select (select count(*)::int from external_events) as events, (select count(*)::int from dag_runs) as runs`;
  return r!;
}

describe('webhooks', () => {
  it('take a signed delivery as an event that starts its runs, and a redelivery once', async () => {
    const body = JSON.stringify({ ref: 'refs/heads/main', after: 'abc' });
    const first = await post('github', body, { 'x-hub-signature-256': sign(body), 'x-github-delivery': 'd-1' });
    expect(first.status).toBe(200);
    expect(first.body).toMatchObject({ duplicate: false, runs: [{ dag_id: 'on-push' }] });
    const before = await stored();
    const replay = await post('github', body, { 'x-hub-signature-256': sign(body), 'x-github-delivery': 'd-1' });
    expect(replay).toEqual({ status: 200, body: { ...first.body, duplicate: true } });
    expect(await stored()).toEqual(before);
    // Another branch: an event, and no run.
    const other = JSON.stringify({ ref: 'refs/heads/dev' });
    const dev = await post('github', other, { 'x-hub-signature-256': sign(other), 'x-github-delivery': 'd-2' });
    expect(dev.body).toMatchObject({ duplicate: false, runs: [] });
  });

  it('end the waits their event matches', async () => {
    await f.api.workflow.applyDag({
      source:
        'dag_id: wait-push\ntasks: [{ id: w, wait: { event: repo.push, match: { after: $conf.sha }, timeout: 1h } }]\n',
      filename: 'wait-push.yaml',
    });
    const run = (await f.api.workflow.triggerRun({ dagId: 'wait-push', confJson: '{"sha":"w-1"}' })).run!;
    const stateOfW = async () =>
      (await f.api.workflow.getRun({ runId: run.runId })).taskInstances.find((t) => t.taskId === 'w')?.state;
    await waitFor('the wait', async () => (await stateOfW()) === TaskState.WAITING, 30_000);
    const body = JSON.stringify({ ref: 'refs/heads/dev', after: 'w-1' });
    const res = await post('github', body, { 'x-hub-signature-256': sign(body), 'x-github-delivery': 'd-w' });
    expect(res.status).toBe(200);
    expect(await stateOfW()).toBe(TaskState.SUCCESS);
    await waitFor(
      'the run to end',
      async () => (await f.api.workflow.getRun({ runId: run.runId })).run!.state === RunState.SUCCESS,
      30_000,
    );
  });

  it('refuse what is not theirs, with the reason, and write nothing', async () => {
    const before = await stored();
    const body = JSON.stringify({ ref: 'refs/heads/main' });
    expect(
      await post('github', body, { 'x-hub-signature-256': sign(body, 'another-key-of-32-characters!!!!') }),
    ).toEqual({
      status: 401,
      body: { error: "x-hub-signature-256: missing, or not sha256=<hex> of the body with the hook's key" },
    });
    expect((await post('github', body)).status).toBe(401);
    // Signed, but another body than the one sent.
    expect((await post('github', `${body} `, { 'x-hub-signature-256': sign(body) })).status).toBe(401);
    expect(await post('nope', body)).toEqual({
      status: 404,
      body: { error: 'no hook "nope" (the server\'s --hooks file names its hooks)' },
    });
    const big = JSON.stringify({ x: 'y'.repeat(70_000) });
    expect(await post('github', big, { 'x-hub-signature-256': sign(big) })).toEqual({
      status: 413,
      body: { error: 'the body is past the limit of 65536 bytes' },
    });
    expect((await post('github', '', {}, 'GET')).status).toBe(405);
    const torn = '{"ref": ';
    expect(await post('github', torn, { 'x-hub-signature-256': sign(torn) })).toMatchObject({
      status: 400,
      body: { error: expect.stringMatching(/^body: is not valid JSON: /) },
    });
    const list = '[1]';
    expect(await post('github', list, { 'x-hub-signature-256': sign(list) })).toEqual({
      status: 400,
      body: { error: 'body: must be a JSON object' },
    });
    expect(await stored()).toEqual(before);
  });

  it('without a key, take the caller as any write on this replica (open Lite on loopback)', async () => {
    const res = await post('plain', '{"n":1}');
    expect(res).toMatchObject({ status: 200, body: { duplicate: false, runs: [] } });
    const [e] = await f.db.sql<{ name: string; actor: { id: string } }[]>`
      select name, actor from external_events where id = ${String(res.body.event_id)}`;
    expect(e).toMatchObject({ name: 'plain', actor: { id: 'local' } });
  });
});
