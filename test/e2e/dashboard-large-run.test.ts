import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launchBrowser, openPage, screenshots } from '../helpers/browser.js';
import { serverForFile } from '../helpers/server-fixture.js';

/**
 * Issue 39: a run of 10,000 tasks stays usable. The graph is replaced by counts by state (past
 * 1,000 tasks), and the task table draws only the rows in view, following the scroll. The Runs
 * page's date filter is checked here too, against the same server.
 */

const TASKS = 10_000;
const f = serverForFile();
let browser: Browser;
let page: Page;
let errors: string[];

beforeAll(async () => {
  browser = await launchBrowser();
  ({ page, errors } = await openPage(browser));
}, 60_000);

afterAll(async () => {
  await browser?.close();
});

describe('a run of 10,000 tasks', () => {
  it('counts the tasks by state instead of drawing them, and draws only the rows in view', async () => {
    const lines = ['dag_id: huge', 'tasks:'];
    for (let i = 0; i < TASKS; i++) lines.push(`  - id: t${i}`, '    command: "true"');
    await f.api.workflow.applyDag({ source: lines.join('\n'), filename: 'huge.yaml' });
    // Paused: the run waits, so the page is looked at, not the work.
    await f.api.workflow.pauseDag({ dagId: 'huge', paused: true });
    const { run } = await f.api.workflow.triggerRun({ dagId: 'huge' });
    const started = Date.now();
    await page.goto(`${f.server.url}/runs/${run!.runId}`);
    await page.locator('[data-graph=summary]', { hasText: '10,000 tasks' }).waitFor();
    await page.locator('tr[data-task-row=t0]').waitFor();
    const ms = Date.now() - started;
    console.log(`a run of ${TASKS} tasks shown in ${ms} ms`);
    expect(await page.locator('g.node').count()).toBe(0);
    const drawn = await page.locator('tr[data-task-row]').count();
    expect(drawn).toBeGreaterThan(10);
    expect(drawn).toBeLessThan(100);
    // Scrolled to the end, the last task's row is drawn and the first's is not.
    await page.locator('.virtual-rows').evaluate((el) => {
      el.scrollTop = el.scrollHeight;
    });
    await page.locator(`tr[data-task-row=t${TASKS - 1}]`).waitFor();
    expect(await page.locator('tr[data-task-row=t0]').count()).toBe(0);
    await screenshots(page, 'run-10000');
    await f.api.workflow.cancelRun({ runId: run!.runId });
    expect(errors).toEqual([]);
  }, 180_000);

  it('filters the Runs page by date on the server', async () => {
    const day = (offset: number) => new Date(Date.now() + offset * 86_400_000).toISOString().slice(0, 10);
    await page.goto(`${f.server.url}/runs?from=${day(0)}&to=${day(0)}`);
    await page.locator('tr[data-run]').first().waitFor();
    expect(await page.locator('input[aria-label=from]').inputValue()).toBe(day(0));
    await page.goto(`${f.server.url}/runs?from=${day(1)}`);
    await page.locator('p.muted', { hasText: 'No runs.' }).waitFor();
    await screenshots(page, 'runs-dates');
    expect(errors).toEqual([]);
  });
});
