import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { screenshots } from '../helpers/browser.js';
import { dashboardPageForFile } from '../helpers/dashboard-page.js';
import { runEnds } from '../helpers/run-ends.js';
import { serverForFile } from '../helpers/server-fixture.js';

/**
 * Issue 40 item 5 on the dashboard: the task page shows each try's output (GetTaskOutput), newest
 * first, cut when long with the rest a click away, and copies it whole.
 */
/** The task page's OUTPUT_SHOWN_CHARS (src/ui/components/task-outputs.tsx; that module needs a window). */
const OUTPUT_SHOWN_CHARS = 8_192;
const f = serverForFile({ tmpPrefix: 'leoflow-dashboard-outputs-' });
const ui = dashboardPageForFile();

beforeAll(async () => {
  await ui.page.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: f.server.url });
}, 60_000);

describe('outputs on the task page', () => {
  it("shows every try's output, cut when long, and copies it whole", async () => {
    // Try 1 writes a small output and fails; try 2 writes a long one and succeeds.
    const script = path.join(f.tmp, 'out.sh');
    await writeFile(
      script,
      [
        '#!/bin/sh',
        `cd "${f.tmp}"`,
        'if [ ! -f tried ]; then touch tried; echo \'{"try": 1, "note": "first"}\' > "$LEOFLOW_OUTPUT"; exit 3; fi',
        'seq 1 3000 | paste -sd, | sed \'s/^/{"try": 2, "rows": [/; s/$/]}/\' > "$LEOFLOW_OUTPUT"',
      ].join('\n'),
      { mode: 0o755 },
    );
    const source = [
      'dag_id: outs',
      'tasks:',
      '  - id: produce',
      `    command: ["${script}"]`,
      '    retries: 1',
      '    retry_delay: 1s',
    ].join('\n');
    await f.api.workflow.applyDag({ source, filename: 'outs.yaml' });
    const { run } = await f.api.workflow.triggerRun({ dagId: 'outs' });
    const runId = run!.runId;
    await ui.page.goto(`${f.server.url}/runs/${runId}/tasks/produce`);
    expect(await runEnds(f.db.sql, runId, { timeoutMs: 30_000 })).toBe('success');
    // Both tries, newest first, appear without a reload as each ends.
    await ui.page.locator('[data-output-try="2"]').waitFor();
    await ui.page.locator('[data-output-try="1"]').waitFor();
    const tries = await ui.page
      .locator('[data-output-try]')
      .evaluateAll((els) => els.map((e) => e.getAttribute('data-output-try')));
    expect(tries).toEqual(['2', '1']);
    expect(await ui.page.locator('[data-output-try="1"] pre').textContent()).toBe(
      '{\n  "try": 1,\n  "note": "first"\n}',
    );
    // The long one is cut, and whole after "Show all".
    const long = ui.page.locator('[data-output-try="2"]');
    expect((await long.locator('pre').textContent())!.length).toBe(OUTPUT_SHOWN_CHARS);
    await long.getByText(/The first 8\.0 KiB of \d+ KiB shown/).waitFor();
    await screenshots(ui.page, 'task-outputs');
    await long.getByRole('button', { name: 'Show all' }).click();
    const whole = JSON.parse((await long.locator('pre').textContent())!) as { rows: number[] };
    expect(whole.rows.length).toBe(3000);
    // The copy is the stored JSON, whole.
    await long.getByRole('button', { name: 'copy output of try 2' }).click();
    await long.getByRole('button', { name: 'copy output of try 2' }).getByText('copied').waitFor();
    // A string: this file is compiled without the DOM's types.
    const copied = await ui.page.evaluate('navigator.clipboard.readText()');
    const stored = (await f.api.workflow.getTaskOutput({ runId, taskId: 'produce', tryNumber: 2 })).outputs[0]!;
    expect(copied).toBe(stored.json);
    expect(ui.errors).toEqual([]);
  }, 90_000);
});
