import { describe, expect, it } from 'vitest';
import { LABEL } from '../../src/core/pod-identity.js';
import { applyDag, triggerByCli } from '../helpers/applied-dag.js';
import { proServerForFile } from '../helpers/fake-kube/pro-server-for-file.js';
import { waitFor } from '../helpers/leoflow-process.js';

/**
 * Pods end with their attempts, with the Pro edition's defaults (only what the shipped manifests
 * set, and a pod server URL the pods cannot reach): a pod whose agent never connects is not left
 * running until the heartbeat reaper calls its attempt `agent_lost`; it fails the attempt with
 * the pod's last lines, and is deleted.
 */

const NS = 'leoflow';
const f = proServerForFile({ namespace: NS, podsCannotConnect: true, tmpPrefix: 'leoflow-pods-end-' });

describe('pods end with their attempts', () => {
  it(
    'fails an attempt whose agent never connects, with the pod’s last lines, and deletes its pod',
    { timeout: 150_000 },
    async () => {
      await applyDag(f.server.url, f.tmp, 'dag_id: unreachable\ntasks:\n  - id: t\n    command: ["true"]\n');
      const runId = await triggerByCli(f.server.url, 'unreachable');
      const t = await waitFor(
        'the attempt ended',
        async () => {
          const [row] = await f.db.sql<{ id: string; state: string; error: string | null }[]>`
            select id, state, error from task_instances where run_id = ${runId}`;
          return row && !['queued', 'running', 'scheduled', 'none'].includes(row.state) ? row : null;
        },
        120_000,
        250,
      );
      expect(t.error).toMatch(
        /^POD_AGENT_NEVER_CONNECTED: pod lf-unreachable-t-[0-9a-f]{12} ran \d+s and its agent never reported the attempt started to http:\/\/127\.0\.0\.1:\d+ .*; last lines: .+/,
      );
      const pod = f.kube.postedPodName({ [LABEL.ti]: t.id, [LABEL.try]: '1' })!;
      await waitFor('its pod deleted', async () => f.kube.pod(NS, pod) === undefined, 30_000);
    },
  );
});
