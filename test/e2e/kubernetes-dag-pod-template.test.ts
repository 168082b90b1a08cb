import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { LABEL } from '../../src/core/pod-identity.js';
import { proServerForFile } from '../helpers/fake-kube/pro-server-for-file.js';
import { cli, waitFor } from '../helpers/leoflow-process.js';

/**
 * A DAG's own `kubernetes.pod_template` on a Pro server with the shipped defaults, in a tasks'
 * namespace that enforces Pod Security `restricted`: what it adds reaches the pod, and what the
 * namespace forbids fails the attempt with admission's own words rather than being dropped.
 */

const NS = 'leoflow-tasks';
const f = proServerForFile({ namespace: NS, tmpPrefix: 'leoflow-dag-template-' });

async function run(dagId: string, kubernetes: string): Promise<{ id: string; state: string; error: string | null }> {
  const file = path.join(f.tmp, `${dagId}.yaml`);
  await writeFile(file, `dag_id: ${dagId}\ntasks:\n  - id: t\n    command: ["true"]\n    kubernetes:\n${kubernetes}`);
  const applied = await cli(f.server.url, ['dag', 'apply', file]);
  expect(applied.code, applied.stderr).toBe(0);
  const r = await cli(f.server.url, ['run', 'trigger', dagId, '--output', 'json']);
  expect(r.code, r.stderr).toBe(0);
  const runId = String((JSON.parse(r.stdout) as { run_id: string }).run_id);
  return waitFor(
    `run ${runId} over`,
    async () => {
      const [row] = await f.db.sql<{ id: string; state: string; error: string | null }[]>`
        select id::text, state, error from task_instances where run_id = ${runId}`;
      return row && ['success', 'failed', 'up_for_retry'].includes(row.state) ? row : null;
    },
    60_000,
    100,
  );
}

describe("a DAG's pod_template", () => {
  it('reaches its pod in a restricted namespace, and what admission forbids fails with its reason', async () => {
    f.kube.labelNamespace(NS, { 'pod-security.kubernetes.io/enforce': 'restricted' });
    const ok = await run('labelled', '      pod_template:\n        metadata: { labels: { team: ml } }\n');
    expect(ok, ok.error ?? '').toMatchObject({ state: 'success' });
    expect(
      f.kube.postedPodName({ [LABEL.ti]: ok.id, [LABEL.try]: '1', team: 'ml' }),
      'its pod, labelled',
    ).toBeDefined();

    const refused = await run(
      'privileged',
      '      pod_template:\n        spec:\n          containers: [{ name: task, securityContext: { privileged: true } }]\n',
    );
    expect(refused.state).toBe('failed');
    expect(refused.error).toMatch(/violates PodSecurity "restricted:latest".*privileged/);
  }, 90_000);
});
