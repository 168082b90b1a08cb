import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launchBrowser, openPage, screenshots } from '../helpers/browser.js';
import { startServer, type ServerProcess } from '../helpers/leoflow-process.js';
import { serverForFile } from '../helpers/server-fixture.js';

/**
 * The dashboard served by an observer replica (it answers reads and refuses every write): its write
 * buttons are disabled, and the page says why, while the same page on a replica that writes offers them.
 */

const f = serverForFile({ tmpPrefix: 'leoflow-dashboard-observer-' });
let observer: ServerProcess;
let browser: Browser;
let page: Page;
let errors: string[];
let runId: string;

const DAG = `dag_id: held
tasks:
  - id: only
    command: echo never runs
`;

beforeAll(async () => {
  await f.api.workflow.applyDag({ source: DAG, filename: 'held.yaml' });
  // Paused: the run waits, so it can still be cancelled (the button's other reason to be disabled).
  await f.api.workflow.pauseDag({ dagId: 'held', paused: true });
  runId = (await f.api.workflow.triggerRun({ dagId: 'held' })).run!.runId;
  observer = await startServer({ env: { DATABASE_URL: f.db.url }, args: ['--role', 'observer'] });
  browser = await launchBrowser();
  ({ page, errors } = await openPage(browser));
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await observer?.kill();
});

describe('the dashboard on an observer replica', () => {
  it('offers the writes on a replica that takes them', async () => {
    await page.goto(`${f.server.url}/runs/${runId}`);
    await page.locator('[data-testid=role]').waitFor();
    await expect.poll(() => page.getByRole('button', { name: 'Cancel run' }).isEnabled()).toBe(true);
    expect(await page.locator('[data-testid=read-only]').count()).toBe(0);
  });

  it('disables them on an observer, and says why', async () => {
    await page.goto(`${observer.url}/runs/${runId}`);
    const why = page.locator('[data-testid=read-only]');
    await why.waitFor();
    expect(await why.textContent()).toMatch(/observer/);
    const cancel = page.getByRole('button', { name: 'Cancel run' });
    expect(await cancel.isDisabled()).toBe(true);
    expect(await cancel.getAttribute('title')).toMatch(/observer/);
    for (const name of ['Cancel', 'Clear']) {
      expect(await page.locator('[data-task-row=only]').getByRole('button', { name, exact: true }).isDisabled()).toBe(
        true,
      );
    }
    await screenshots(page, 'run-observer');
    await page.goto(`${observer.url}/`);
    await page.locator('[data-testid=read-only]').waitFor();
    for (const name of ['Unpause', 'Trigger…']) {
      expect(await page.getByRole('button', { name }).isDisabled()).toBe(true);
    }
    expect(errors).toEqual([]);
  });
});
