import { execFile } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { promisify } from 'node:util';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { TaskState } from '../../src/gen/leoflow/v1/types_pb.js';
import { screenshots } from '../helpers/browser.js';
import { dashboardPageForFile } from '../helpers/dashboard-page.js';
import { httpGet } from '../helpers/http-get.js';
import { waitFor } from '../helpers/leoflow-process.js';
import { connectedAgent, serverForFile } from '../helpers/server-fixture.js';
import { wideDagSource } from '../helpers/wide-dag.js';

/**
 * The dashboard in a real browser (Debian's Chromium, headless) against a real `leoflow server`
 * (Lite, open on loopback): served from the API port, a run triggered from the page turns its graph
 * green as it happens, a task's log grows as its lines are written, and every page is saved as a
 * screenshot at 1280×800 and 800 px wide (test/e2e/screenshots).
 */

const execFileP = promisify(execFile);
const f = serverForFile({ tmpPrefix: 'leoflow-dashboard-', args: ['--tick-interval', '200ms'] });
const ui = dashboardPageForFile();

const DAG = `dag_id: ui_demo
description: A short chain for the dashboard's tests.
tasks:
  - id: extract
    command: sleep 1.5
  - id: transform
    depends_on: [extract]
    command: ["sh", "-c", "echo first line; sleep 2; echo second line"]
  - id: load
    depends_on: [transform]
    command: echo loaded
`;

beforeAll(async () => {
  await writeFile(path.join(f.tmp, 'ui-demo.yaml'), DAG);
  await f.api.workflow.applyDag({ source: DAG, filename: 'ui-demo.yaml' });
}, 60_000);

describe('the dashboard', () => {
  it('is served on the API port: index.html for / and client routes, hashed assets cached long', async () => {
    const root = await httpGet(`${f.server.url}/`);
    expect(root.status).toBe(200);
    expect(root.headers['content-type']).toBe('text/html; charset=utf-8');
    const asset = /src="(\/assets\/[^"]+\.js)"/.exec(root.body)?.[1];
    expect(asset).toBeDefined();
    const js = await httpGet(`${f.server.url}${asset}`);
    expect(js.headers['content-type']).toBe('text/javascript; charset=utf-8');
    expect(js.headers['cache-control']).toBe('public, max-age=31536000, immutable');
    expect((await httpGet(`${f.server.url}/runs/12`)).headers['content-type']).toContain('text/html');
    // Over HTTP/2 too (a browser over TLS speaks it), gzipped when asked.
    const h2 = await execFileP('curl', [
      '-sS',
      '--http2-prior-knowledge',
      '--compressed',
      '-o',
      '/dev/null',
      '-w',
      '%{http_version} %{http_code} %{size_download}',
      `${f.server.url}${asset}`,
    ]);
    const [version, status, size] = h2.stdout.split(' ');
    expect([version, status]).toEqual(['2', '200']);
    expect(Number(size)).toBeLessThan(Number(js.headers['content-length']) / 2);
    // The API still answers on the same port.
    expect((await f.api.workflow.listDags({})).dags.map((d) => d.dagId)).toContain('ui_demo');
  });

  it('triggers a run from the DAGs page and shows its graph turning green live', async () => {
    await ui.page.goto(`${f.server.url}/`);
    await ui.page.locator('[data-testid=role]').getByText('role admin').waitFor();
    const row = ui.page.locator('tr[data-dag="ui_demo"]');
    await row.getByRole('button', { name: 'Trigger…' }).click();
    const conf = ui.page.locator('textarea[name=conf]');
    await conf.fill('{"size": ');
    await expect.poll(() => ui.page.locator('.field-error').textContent()).toContain('JSON');
    expect(await ui.page.getByRole('button', { name: 'Trigger run' }).isDisabled()).toBe(true);
    await conf.fill('[1, 2]');
    await expect.poll(() => ui.page.locator('.field-error').textContent()).toContain('must be a JSON object');
    await conf.fill('{"size": 3}');
    await screenshots(ui.page, 'dags-trigger');
    await ui.page.getByRole('button', { name: 'Trigger run' }).click();
    await ui.page.waitForURL(/\/runs\/\d+$/);
    const node = (task: string) => ui.page.locator(`g.node[data-task="${task}"]`);
    // Seen running, then succeeded, without a reload: the page follows WatchRun.
    await node('extract').and(ui.page.locator('[data-state="running"]')).waitFor();
    await ui.page.locator('td', { hasText: 'waiting for its upstream tasks to finish' }).first().waitFor();
    await screenshots(ui.page, 'run-live');
    for (const t of ['extract', 'transform', 'load'])
      await node(t).and(ui.page.locator('[data-state="success"]')).waitFor();
    await ui.page.locator('h1 .badge', { hasText: 'success' }).waitFor();
    // The timeline: one bar per task, in the order they ran, each ending after it starts.
    const bars = ui.page.locator('.timeline .bar');
    await waitFor('three bars', async () => (await bars.count()) === 3);
    const boxes = await Promise.all([0, 1, 2].map(async (i) => (await bars.nth(i).boundingBox())!));
    expect(boxes[0]!.x).toBeLessThan(boxes[1]!.x);
    expect(boxes[1]!.x).toBeLessThan(boxes[2]!.x);
    await screenshots(ui.page, 'run');
    expect(ui.errors).toEqual([]);
  });

  it("follows a task's log as its lines arrive", async () => {
    const { run } = await f.api.workflow.triggerRun({ dagId: 'ui_demo' });
    await ui.page.goto(`${f.server.url}/runs/${run!.runId}/tasks/transform`);
    const log = ui.page.locator('[data-testid=log]');
    await log.locator('.line.stdout', { hasText: 'first line' }).waitFor({ timeout: 20_000 });
    // The second line is written two seconds after the first: it must not be there yet.
    expect(await log.locator('.line.stdout').allTextContents()).toEqual(['1first line']);
    await ui.page.locator('.log .live').waitFor();
    await screenshots(ui.page, 'task-following');
    await log.locator('.line.stdout', { hasText: 'second line' }).waitFor({ timeout: 10_000 });
    await ui.page.locator('[data-testid=exit-code]', { hasText: '0' }).waitFor();
    await ui.page.locator('.log-head', { hasText: 'ended' }).waitFor();
    const tries = ui.page.locator('[data-testid=tries] tbody tr');
    await tries.filter({ hasText: 'success' }).waitFor();
    expect(await tries.count()).toBe(1);
    expect(await tries.locator('td').nth(2).textContent()).toBe('0');
    await screenshots(ui.page, 'task');
    expect(ui.errors).toEqual([]);
  });

  it('keeps a followed log at its end, stays put when scrolled up, and jumps to the end', async () => {
    const source = [
      'dag_id: chatty',
      'tasks:',
      '  - id: talk',
      '    command: ["sh", "-c", "seq 1 120; sleep 2; echo last line"]',
    ].join('\n');
    await f.api.workflow.applyDag({ source, filename: 'chatty.yaml' });
    const { run } = await f.api.workflow.triggerRun({ dagId: 'chatty' });
    await ui.page.goto(`${f.server.url}/runs/${run!.runId}/tasks/talk`);
    const log = ui.page.locator('[data-testid=log]');
    await log.locator('.line.stdout', { hasText: /^1120$/ }).waitFor({ timeout: 20_000 });
    const gapBelow = () => log.evaluate((el) => el.scrollHeight - el.scrollTop - el.clientHeight);
    // Following: the newest line is in view.
    await waitFor('the log at its end', async () => (await gapBelow()) < 2);
    // Scrolled up, it stays put as lines arrive, and offers the jump.
    await log.evaluate((el) => {
      el.scrollTop = 0;
    });
    const jump = ui.page.getByRole('button', { name: 'Jump to end ↓' });
    await jump.waitFor();
    await log.locator('.line.stdout', { hasText: 'last line' }).waitFor({ timeout: 10_000 });
    expect(await log.evaluate((el) => el.scrollTop)).toBe(0);
    await jump.click();
    await waitFor('the log at its end again', async () => (await gapBelow()) < 2);
    await jump.waitFor({ state: 'detached' });
    expect(ui.errors).toEqual([]);
  });

  it('shows the signal that killed a try, on the task page and in the API', async () => {
    const source = 'dag_id: killed\ntasks:\n  - id: self_kill\n    command: ["sh", "-c", "kill -KILL $$"]\n';
    await f.api.workflow.applyDag({ source, filename: 'killed.yaml' });
    const { run } = await f.api.workflow.triggerRun({ dagId: 'killed' });
    await ui.page.goto(`${f.server.url}/runs/${run!.runId}/tasks/self_kill`);
    const tries = ui.page.locator('[data-testid=tries] tbody tr');
    await tries.filter({ hasText: 'failed' }).waitFor({ timeout: 20_000 });
    expect(await tries.locator('[data-testid=try-exit]').textContent()).toBe('SIGKILL');
    const { taskInstances } = await f.api.workflow.listTaskInstances({ runId: run!.runId });
    expect(taskInstances[0]).toMatchObject({ state: TaskState.FAILED, signal: 'SIGKILL' });
    expect(taskInstances[0]!.exitCode).toBeUndefined();
    // The latest try's facts come from the API's TaskInstance (its signal field), not the events.
    await ui.page.locator('[data-testid=exit-code]', { hasText: 'killed by SIGKILL' }).waitFor();
    await screenshots(ui.page, 'task-killed');
    expect(ui.errors).toEqual([]);
  });

  it('approves a waiting approval task from the run page, and shows a missed deadline', async () => {
    const source = [
      'dag_id: gated',
      'deadline: 1s',
      'tasks:',
      '  - id: sign_off',
      '    approval: { role: operator, timeout: 1h, message: "Ship it?" }',
      '  - id: ship',
      '    depends_on: [sign_off]',
      '    command: ["true"]',
      '',
    ].join('\n');
    await f.api.workflow.applyDag({ source, filename: 'gated.yaml' });
    const { run } = await f.api.workflow.triggerRun({ dagId: 'gated' });
    await ui.page.goto(`${f.server.url}/runs/${run!.runId}`);
    const row = ui.page.locator('tr[data-task-row="sign_off"]');
    await row.getByText('waiting for an approval (role operator or above)').waitFor({ timeout: 20_000 });
    // The deadline passes while it waits: the page says so when the leader marks it.
    await ui.page.locator('[data-testid=deadline] .badge.s-missed').waitFor({ timeout: 20_000 });
    const asked: string[] = [];
    ui.page.once('dialog', (d) => {
      asked.push(d.message());
      void d.accept();
    });
    await row.getByRole('button', { name: 'Approve' }).click();
    await ui.page.locator('g.node[data-task="ship"][data-state="success"]').waitFor({ timeout: 20_000 });
    expect(asked).toEqual(['Approve task sign_off? It succeeds, and the run goes on.']);
    await screenshots(ui.page, 'run-approved');
    expect(ui.errors).toEqual([]);
  });

  it('draws a run of 500 tasks on first load within a second or two', async () => {
    await f.api.workflow.applyDag({ source: wideDagSource('wide', 500), filename: 'wide.yaml' });
    // Paused, so the run waits and the machine stays quiet while the page is timed.
    await f.api.workflow.pauseDag({ dagId: 'wide', paused: true });
    const { run } = await f.api.workflow.triggerRun({ dagId: 'wide' });
    const started = Date.now();
    await ui.page.goto(`${f.server.url}/runs/${run!.runId}`);
    await waitFor('500 tasks drawn', async () => (await ui.page.locator('g.node').count()) === 500, 10_000, 20);
    const ms = Date.now() - started;
    console.log(`a run of 500 tasks drawn in ${ms} ms`);
    // Under a second on an idle machine; the bound leaves room for a busy shared one.
    expect(ms).toBeLessThan(2_500);
    await ui.page.locator('td', { hasText: 'the DAG is paused' }).first().waitFor();
    await screenshots(ui.page, 'run-500');
    await f.api.workflow.cancelRun({ runId: run!.runId });
  });

  it('lists runs with filters, live; shows the fleet and drains an agent', async () => {
    await ui.page.goto(`${f.server.url}/runs?dag=ui_demo`);
    await ui.page.locator('tr[data-run]').first().waitFor();
    const before = await ui.page.locator('tr[data-run]').count();
    const { run } = await f.api.workflow.triggerRun({ dagId: 'ui_demo' });
    // A new run appears without a reload, then ends as success.
    const row = ui.page.locator(`tr[data-run="${run!.runId}"]`);
    await row.waitFor();
    expect(await ui.page.locator('tr[data-run]').count()).toBe(before + 1);
    await row.locator('.badge', { hasText: 'success' }).waitFor({ timeout: 20_000 });
    await screenshots(ui.page, 'runs');
    await ui.page.goto(`${f.server.url}/runs?dag=ui_demo&state=failed`);
    await ui.page.getByText('No runs.').waitFor();
    const agent = await connectedAgent(f, 'ui-agent-1', {
      args: ['--labels', 'zone=a,gpu=none', '--capabilities', 'docker,cuda', '--slots', '2'],
    });
    try {
      await ui.page.goto(`${f.server.url}/fleet`);
      await ui.page.locator('.badge', { hasText: 'leader' }).waitFor();
      const row = ui.page.locator('tr[data-agent="ui-agent-1"]');
      await row.locator('.badge', { hasText: 'healthy' }).waitFor();
      expect(await row.textContent()).toContain('zone=a');
      await row.locator('[data-capability=cuda]').waitFor();
      // The replica's queue depth and each health check, with its result.
      expect(await ui.page.getByTestId('queue-depth').textContent()).toMatch(/^\d+ of \d+ in the dispatch queue$/);
      await ui.page.locator('[data-check="ready/database"] .badge', { hasText: 'ok' }).waitFor();
      expect(await ui.page.locator('[data-check^="live/"]').count()).toBeGreaterThan(0);
      await row.getByRole('button', { name: 'Drain' }).click();
      await row.locator('.badge', { hasText: 'draining' }).waitFor();
      const listed = await f.api.cluster.listAgents({});
      expect(listed.agents.find((a) => a.agentId === 'ui-agent-1')?.draining).toBe(true);
      await screenshots(ui.page, 'fleet');
      await row.getByRole('button', { name: 'Undrain' }).click();
      await waitFor('undrained', async () => !(await row.textContent())?.includes('draining'));
    } finally {
      await agent.stop(5_000);
    }
    await ui.page.goto(`${f.server.url}/`);
    await waitFor('strip of three runs', async () => (await ui.page.locator('.strip .cell').count()) >= 3);
    await screenshots(ui.page, 'dags');
    expect(ui.errors).toEqual([]);
  });
});
