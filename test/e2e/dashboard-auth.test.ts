import { randomBytes } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import { createClients, type Clients } from '../../src/cli/client.js';
import { screenshots } from '../helpers/browser.js';
import { dashboardPageForFile } from '../helpers/dashboard-page.js';
import { waitFor } from '../helpers/leoflow-process.js';
import { serverForFile } from '../helpers/server-fixture.js';
import { processEnds, processGone } from '../helpers/process-gone.js';

/**
 * The dashboard on a server that requires tokens (Pro, subprocess executor): it asks for a token
 * and keeps it for the tab, shows the role, disables what the role may not do (and the server
 * refuses a forced call anyway), and an operator cancels a running task from the page, whose
 * process then ends.
 */

const ADMIN = `lf_${randomBytes(32).toString('base64url')}`;
const f = serverForFile({
  tmpPrefix: 'leoflow-dashboard-auth-',
  args: ['--edition', 'pro', '--executor', 'subprocess', '--bootstrap-admin-token', ADMIN, '--tick-interval', '200ms'],
  env: { LEOFLOW_INSECURE: undefined, LEOFLOW_TOKEN: undefined },
});
const ui = dashboardPageForFile();
let admin: Clients;
let viewer: string;

const DAG = `dag_id: long_job
tasks:
  - id: work
    command: ["sh", "-c", "echo working; sleep 60"]
`;

async function token(role: string): Promise<string> {
  return (await admin.tokens.createToken({ name: `ui-${role}`, role })).secret;
}

async function signIn(secret: string): Promise<void> {
  await ui.page.goto(`${f.server.url}/`);
  await ui.page.locator('input[name=token]').fill(secret);
  await ui.page.getByRole('button', { name: 'Use token' }).click();
}

beforeAll(async () => {
  admin = createClients(f.server.url, null, ADMIN);
  await admin.workflow.applyDag({ source: DAG, filename: 'long-job.yaml' });
}, 60_000);

describe('the dashboard with tokens', () => {
  let runId: string;

  it('asks for a token, keeps it in session storage, and shows the role', async () => {
    await ui.page.goto(`${f.server.url}/`);
    await ui.page.locator('input[name=token]').waitFor();
    await screenshots(ui.page, 'token');
    await signIn('lf_not-a-real-token');
    await ui.page.locator('.token-form', { hasText: 'The server refused that token' }).waitFor();
    viewer = await token('viewer');
    await signIn(viewer);
    await ui.page.locator('[data-testid=role]', { hasText: 'role viewer' }).waitFor();
    expect(await ui.page.evaluate("sessionStorage.getItem('leoflow.token')")).toBe(viewer);
    await ui.page.reload();
    await ui.page.locator('[data-testid=role]', { hasText: 'role viewer' }).waitFor();
  });

  it('a viewer cannot cancel: the buttons are disabled, and a forced call is refused', async () => {
    const { run } = await admin.workflow.triggerRun({ dagId: 'long_job' });
    runId = run!.runId;
    await ui.page.goto(`${f.server.url}/runs/${runId}`);
    await ui.page.locator('g.node[data-task="work"][data-state="running"]').waitFor({ timeout: 30_000 });
    expect(await ui.page.getByRole('button', { name: 'Cancel run' }).isDisabled()).toBe(true);
    expect(await ui.page.locator('tr[data-task-row="work"]').getByRole('button', { name: 'Cancel' }).isDisabled()).toBe(
      true,
    );
    await screenshots(ui.page, 'run-viewer');
    const forced = await ui.page.evaluate(
      async ({ id, secret }) => {
        const res = await fetch('/leoflow.v1.WorkflowService/CancelRun', {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            authorization: `Bearer ${secret}`,
          },
          body: JSON.stringify({ runId: id }),
        });
        return { status: res.status, body: (await res.json()) as { code: string; message: string } };
      },
      { id: runId, secret: viewer },
    );
    expect(forced.status).toBe(403);
    expect(forced.body.code).toBe('permission_denied');
    expect(forced.body.message).toContain('needs role operator');
    expect((await admin.workflow.getRun({ runId })).run!.state).toBe(2); // RUNNING still
    await ui.page.goto(`${f.server.url}/`);
    expect(await ui.page.getByRole('button', { name: 'Trigger…' }).isDisabled()).toBe(true);
    expect(ui.errors).toEqual([]);
  });

  it('an operator cancels the running task from the page, after a confirmation, and its process ends', async () => {
    const log = await waitFor('the task to log its pid', async () => {
      const lines: string[] = [];
      for await (const res of admin.workflow.tailLogs({ runId, taskId: 'work' }))
        lines.push(...res.lines.map((l) => l.line));
      return lines.find((l) => /started pid \d+/.test(l));
    });
    const pid = Number(/started pid (\d+)/.exec(log)![1]);
    expect(processGone(pid)).toBe(false);
    await ui.page.getByRole('button', { name: 'sign out' }).click();
    await signIn(await token('operator'));
    await ui.page.locator('[data-testid=role]', { hasText: 'role operator' }).waitFor();
    await ui.page.goto(`${f.server.url}/runs/${runId}`);
    const cancel = ui.page.locator('tr[data-task-row="work"]').getByRole('button', { name: 'Cancel' });
    await cancel.waitFor();
    const asked: string[] = [];
    ui.page.once('dialog', (d) => {
      asked.push(d.message());
      void d.accept();
    });
    await cancel.click();
    await ui.page.locator('g.node[data-task="work"][data-state="cancelled"]').waitFor({ timeout: 30_000 });
    expect(asked).toEqual(['Cancel task work?']);
    await processEnds(pid, 15_000, 'the task process to end');
    await screenshots(ui.page, 'run-cancelled');
    expect(ui.errors).toEqual([]);
  });
});
