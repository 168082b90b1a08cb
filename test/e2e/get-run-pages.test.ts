import { toBinary } from '@bufbuild/protobuf';
import { Code, ConnectError } from '@connectrpc/connect';
import { afterAll, describe, expect, it } from 'vitest';
import { applyDag } from '../helpers/applied-dag.js';
import { launchBrowser, openPage } from '../helpers/browser.js';
import { mapDag } from '../helpers/map-dag.js';
import { GetRunResponseSchema } from '../../src/gen/leoflow/v1/workflow_pb.js';
import { cli, waitFor } from '../helpers/leoflow-process.js';
import { runEnds } from '../helpers/run-ends.js';
import { serverForFile } from '../helpers/server-fixture.js';
import type { Browser } from 'playwright-core';

/**
 * GetRun pages a run's task instances: its own first, then each mapped task's instances in item
 * order, a page stopping at page_size or 3 MiB, so a run of a 100,000-item map is read in pages
 * under gRPC's default 4 MiB (it was one answer of all of them), and `run show` still shows it.
 * The file takes 30-60 s on a loaded machine: 100,000 items is the size the issue names, and
 * fewer would fit a page or two.
 */
const f = serverForFile({ tmpPrefix: 'leoflow-get-run-pages-', args: ['--max-output-size', '1MiB'] });
/** The run of the 100,000-item map, read by the dashboard after the API. */
let bigRun = '';
let browser: Browser | undefined;
afterAll(async () => {
  await browser?.close();
});

async function mapRun(dagId: string, n: number, each: string): Promise<string> {
  const gen = `seq 0 $((${n} - 1)) | paste -sd, - | sed 's/^/{"items":[/; s/$/]}/' > "$LEOFLOW_OUTPUT"`;
  await applyDag(f.server.url, f.tmp, mapDag({ dagId, gen, each, collect: 'true' }));
  return (await f.api.workflow.triggerRun({ dagId })).run!.runId;
}

async function invalid(call: Promise<unknown>): Promise<string> {
  const err = await call.then(
    () => null,
    (e: unknown) => ConnectError.from(e),
  );
  expect(err?.code).toBe(Code.InvalidArgument);
  return err!.rawMessage;
}

describe('GetRun pages', () => {
  it('pages by page_size: own task instances, then mapped ones in item order, each once, with counts', async () => {
    const runId = await mapRun('small_map', 3, `printf '%s' "$LEOFLOW_MAP_ITEM" > "$LEOFLOW_OUTPUT"`);
    expect(await runEnds(f.db.sql, runId, { timeoutMs: 30_000 })).toBe('success');
    const pages: string[][] = [];
    let pageToken = '';
    do {
      const res = await f.api.workflow.getRun({ runId, pageSize: 2, pageToken, withOutputs: true });
      pages.push(res.taskInstances.map((t) => `${t.taskId}=${t.outputJson}`));
      const each = res.taskInstances.find((t) => t.taskId === 'each');
      if (each) {
        expect(each.mapCount).toBe(3);
        expect(each.mapStateCounts).toEqual({ success: 3 });
      }
      pageToken = res.nextPageToken;
    } while (pageToken !== '' && pages.length < 10);
    expect(pages).toEqual([
      ['gen={"items": [0, 1, 2]}', 'each='],
      ['collect=', 'each[0]=0'],
      ['each[1]=1', 'each[2]=2'],
    ]);
    // The default: everything in one page, as before paging.
    const whole = await f.api.workflow.getRun({ runId });
    expect(whole.taskInstances.map((t) => t.taskId)).toEqual([
      'gen',
      'each',
      'collect',
      'each[0]',
      'each[1]',
      'each[2]',
    ]);
    expect(whole.nextPageToken).toBe('');
    expect(await invalid(f.api.workflow.getRun({ runId, pageToken: 'x1' }))).toMatch(/page_token/);
    expect(await invalid(f.api.workflow.getRun({ runId, pageSize: -1 }))).toMatch(/page_size/);
    expect(await invalid(f.api.workflow.getRun({ runId, pageSize: 100_001 }))).toMatch(/page_size/);

    // ListTaskInstances pages the same way, with the same tokens.
    const listed: string[][] = [];
    pageToken = '';
    do {
      const res = await f.api.workflow.listTaskInstances({ runId, pageSize: 2, pageToken, withOutputs: true });
      listed.push(res.taskInstances.map((t) => `${t.taskId}=${t.outputJson}`));
      expect(res.taskInstances.find((t) => t.taskId === 'each')?.mapStateCounts ?? { success: 3 }).toEqual({
        success: 3,
      });
      pageToken = res.nextPageToken;
    } while (pageToken !== '' && listed.length < 10);
    expect(listed).toEqual(pages);
    expect((await f.api.workflow.listTaskInstances({ runId })).taskInstances.map((t) => t.taskId)).toEqual(
      whole.taskInstances.map((t) => t.taskId),
    );
    expect(await invalid(f.api.workflow.listTaskInstances({ runId, pageToken: 'x1' }))).toMatch(/page_token/);
  }, 60_000);

  it('reads a 100,000-item map in pages under 4 MiB; run show counts it, run show -o json lists it', async () => {
    const n = 100_000;
    // Items that never start: the run is read while they wait (and cancelled after).
    const runId = await mapRun('big_map', n, 'sleep 60');
    bigRun = runId;
    await waitFor(
      '100,000 mapped instances',
      async () => {
        const [row] = await f.db.sql<{ map_count: number | null }[]>`
          select map_count from task_instances where run_id = ${runId} and task_id = 'each'`;
        return row?.map_count ?? null;
      },
      60_000,
      50,
    );
    expect((await cli(f.server.url, ['run', 'cancel', runId])).code).toBe(0);
    expect(await runEnds(f.db.sql, runId, { timeoutMs: 60_000 })).toBe('cancelled');

    const sizes: number[] = [];
    const mapped: string[] = [];
    let pageToken = '';
    const t0 = Date.now();
    for (let page = 0; page < 20; page++) {
      const res = await f.api.workflow.getRun({ runId, pageToken });
      sizes.push(toBinary(GetRunResponseSchema, res).length);
      if (page === 0) {
        expect(res.taskInstances.slice(0, 3).map((t) => t.taskId)).toEqual(['gen', 'each', 'collect']);
        const each = res.taskInstances[1]!;
        expect(each.mapCount).toBe(n);
        expect(Object.values(each.mapStateCounts).reduce((a, b) => a + b, 0)).toBe(n);
      }
      mapped.push(...res.taskInstances.filter((t) => t.taskId.startsWith('each[')).map((t) => t.taskId));
      pageToken = res.nextPageToken;
      if (pageToken === '') break;
    }
    const mib = sizes.map((s) => (s / 2 ** 20).toFixed(2)).join(', ');
    console.log(`GetRun of a ${n}-item map: ${sizes.length} pages (${mib} MiB) in ${Date.now() - t0} ms`);
    expect(sizes.length).toBeGreaterThan(1);
    expect(Math.max(...sizes)).toBeLessThan(4 * 2 ** 20);
    expect(mapped.length).toBe(n);
    expect(mapped.every((id, i) => id === `each[${i}]`)).toBe(true);

    const show = await cli(f.server.url, ['run', 'show', runId]);
    expect(show.code, show.stderr).toBe(0);
    expect(show.stdout).toMatch(/each\[0\.\.99999\]\s+100000 cancelled/);
    const json = await cli(f.server.url, ['run', 'show', runId, '-o', 'json'], { timeoutMs: 60_000 });
    expect(json.code, json.stderr).toBe(0);
    const tis = (JSON.parse(json.stdout) as { task_instances: { task_id: string }[] }).task_instances;
    expect(tis.length).toBe(n + 3);
    expect(new Set(tis.map((t) => t.task_id)).size).toBe(n + 3);
  }, 180_000);

  it("the dashboard's run page lists every mapped instance of the 100,000-item map", async () => {
    expect(bigRun).not.toBe('');
    browser = await launchBrowser();
    const { page, errors } = await openPage(browser);
    const t0 = Date.now();
    await page.goto(`${f.server.url}/runs/${bigRun}`);
    await page.locator('tr[data-task-row="each[0]"]').waitFor({ timeout: 60_000 });
    console.log(`the run page of a 100,000-item map shown in ${Date.now() - t0} ms`);
    // The last mapped instance is on GetRun's last page: its row is there once scrolled to.
    await page.locator('.virtual-rows').evaluate((el) => {
      el.scrollTop = el.scrollHeight;
    });
    await page.locator('tr[data-task-row="each[99999]"]').waitFor({ timeout: 30_000 });
    expect(errors).toEqual([]);
  }, 120_000);
});
