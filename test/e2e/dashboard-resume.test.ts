import { beforeAll, describe, expect, it } from 'vitest';
import { openPage, screenshots } from '../helpers/browser.js';
import { dashboardPageForFile } from '../helpers/dashboard-page.js';
import { startServer, waitFor } from '../helpers/leoflow-process.js';
import { serverForFile } from '../helpers/server-fixture.js';
import { startTcpProxy } from '../helpers/tcp-proxy.js';

/**
 * A dashboard that loses the server for a while (a laptop lid closed, a network blip) picks its
 * streams up again from the last event it received: what happened meanwhile is shown, with no
 * reload. The browser reaches the server through a proxy that the test takes away and brings back.
 */

const f = serverForFile({ tmpPrefix: 'leoflow-dashboard-resume-', args: ['--tick-interval', '200ms'] });
const ui = dashboardPageForFile();

const DAG = `dag_id: gap
tasks:
  - id: first
    command: sleep 2
  - id: second
    depends_on: [first]
    command: echo ran while the dashboard was away
`;

beforeAll(async () => {
  await f.api.workflow.applyDag({ source: DAG, filename: 'gap.yaml' });
}, 60_000);

describe('the dashboard after a lost connection', () => {
  it('resumes its streams from the last event received and misses none', async () => {
    const target = { host: '127.0.0.1', port: Number(new URL(f.server.url).port) };
    let proxy = await startTcpProxy(target);
    const port = proxy.port;
    try {
      const { run } = await f.api.workflow.triggerRun({ dagId: 'gap' });
      const runId = run!.runId;
      await ui.page.goto(`http://127.0.0.1:${port}/runs/${runId}/tasks/second`);
      await ui.page.getByText('No try has started yet.').waitFor();
      await ui.page.locator('.log .live').waitFor();
      // Gone: every connection cut, and no new one taken, while `second` runs and the run ends.
      await proxy.close();
      await waitFor(
        'the run to end',
        async () => (await f.api.workflow.getRun({ runId })).run!.state === 3, // SUCCESS
        20_000,
      );
      await ui.page.locator('.log .error').waitFor();
      proxy = await startTcpProxy(target, { port });
      // Back: the try that started and ended meanwhile is told by the replayed events (the tries
      // table is built from events alone), and the log by the follow opened again.
      const row = ui.page.locator('[data-testid=tries] tbody tr');
      await row.filter({ hasText: 'success' }).waitFor({ timeout: 20_000 });
      expect(await row.count()).toBe(1);
      await ui.page
        .locator('[data-testid=log] .line.stdout', { hasText: 'ran while the dashboard was away' })
        .waitFor();
      expect(await ui.page.locator('[data-testid=log] .line.stdout').count()).toBe(1);
      await ui.page.locator('h1 .badge', { hasText: 'success' }).waitFor();
      expect(await ui.page.locator('.log .error').count()).toBe(0);
      await screenshots(ui.page, 'task-resumed');
      expect(ui.errors).toEqual([]);
    } finally {
      await ui.page.close();
      await proxy.close();
    }
  });

  it('resumes on another replica when the one serving it ends, and misses no event', async () => {
    // A second replica, an observer (it serves reads, runs no task): the page is on it, through a
    // proxy, when it stops and its streams end; the proxy then leads to the first replica.
    const observer = await startServer({ env: { DATABASE_URL: f.db.url }, args: ['--role', 'observer'] });
    const home = { host: '127.0.0.1', port: Number(new URL(f.server.url).port) };
    let proxy = await startTcpProxy({ host: '127.0.0.1', port: Number(new URL(observer.url).port) });
    const port = proxy.port;
    Object.assign(ui, await openPage(ui.browser));
    try {
      const { run } = await f.api.workflow.triggerRun({ dagId: 'gap' });
      const runId = run!.runId;
      await ui.page.goto(`http://127.0.0.1:${port}/runs/${runId}/tasks/second`);
      // An observer's page asks for no token on an open server (WhoAmI is a read it answers).
      await ui.page.getByText('No try has started yet.').waitFor();
      await ui.page.locator('.log .live').waitFor();
      // The serving replica goes (SIGTERM: it ends its streams) while `second` runs and the run ends.
      await observer.stop(10_000);
      await proxy.close();
      await waitFor(
        'the run to end',
        async () => (await f.api.workflow.getRun({ runId })).run!.state === 3, // SUCCESS
        20_000,
      );
      proxy = await startTcpProxy(home, { port });
      const row = ui.page.locator('[data-testid=tries] tbody tr');
      await row.filter({ hasText: 'success' }).waitFor({ timeout: 20_000 });
      expect(await row.count()).toBe(1);
      await ui.page
        .locator('[data-testid=log] .line.stdout', { hasText: 'ran while the dashboard was away' })
        .waitFor();
      expect(await ui.page.locator('[data-testid=log] .line.stdout').count()).toBe(1);
      await ui.page.locator('h1 .badge', { hasText: 'success' }).waitFor();
      // The try's start and its end were both replayed (its duration needs the two), with no reload.
      expect(await row.locator('td').nth(3).textContent()).toMatch(/^\d+(\.\d)? m?s$/);
      expect(ui.errors).toEqual([]);
    } finally {
      await ui.page.close();
      await proxy.close();
      await observer.kill();
    }
  });
});
