import { beforeAll, describe, expect, it } from 'vitest';
import { RunState } from '../../src/gen/leoflow/v1/types_pb.js';
import { dashboardPageForFile } from '../helpers/dashboard-page.js';
import { waitFor } from '../helpers/leoflow-process.js';
import { serverForFile } from '../helpers/server-fixture.js';

/**
 * The run page reads a run once and then watches from where that read stands (GetRun's watch_seq),
 * as a Kubernetes client lists and then watches from the list's resourceVersion. Before, it watched
 * from the run's first event, and the replay of a finished run's history read the run again, every
 * page of it (a 100,000-item map: seconds, several times). A change after the read still shows.
 */

const f = serverForFile({ tmpPrefix: 'leoflow-dashboard-reads-' });
const d = dashboardPageForFile();
let getRuns = 0;

const DAG = `dag_id: three
tasks:
  - id: a
    command: "true"
  - id: b
    command: "true"
    depends_on: [a]
  - id: c
    command: "true"
    depends_on: [b]
`;

beforeAll(() => {
  d.page.on('request', (r) => {
    if (r.url().endsWith('/leoflow.v1.WorkflowService/GetRun')) getRuns++;
  });
});

describe('the run page reads a run once, then follows it', () => {
  it('does not read a finished run again for the replay of its history, and shows a later change', async () => {
    await f.api.workflow.applyDag({ source: DAG, filename: 'three.yaml' });
    const runId = (await f.api.workflow.triggerRun({ dagId: 'three' })).run!.runId;
    await waitFor(
      'the run succeeded',
      async () => ((await f.api.workflow.getRun({ runId })).run!.state === RunState.SUCCESS ? true : null),
      30_000,
      100,
    );
    await d.page.goto(`${f.server.url}/runs/${runId}`);
    await d.page.locator('[data-task-row=c]', { hasText: '1/1' }).waitFor();
    // Well past the 300 ms after which a batch of events asks for a read.
    await new Promise((r) => setTimeout(r, 2_000));
    expect(getRuns).toBe(1);
    // A clear after the read: its events come on the watch, and the page reads the run again.
    await f.api.workflow.clearTaskInstance({ runId, taskId: 'c' });
    // Cleared, it runs a second try (of 2: a clear gives it one more).
    await d.page.locator('[data-task-row=c]', { hasText: '2/2' }).waitFor({ timeout: 30_000 });
    expect(getRuns).toBeGreaterThan(1);
    expect(d.errors).toEqual([]);
  }, 90_000);
});
