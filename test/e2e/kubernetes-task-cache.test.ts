import { describe, expect, it } from 'vitest';
import { idempotencyKey } from '../../src/core/idempotency-key.js';
import { installIdentity } from '../../src/db/install-identity.js';
import { applyDag, expectRunSucceeds, triggerByCli } from '../helpers/applied-dag.js';
import { proServerForFile } from '../helpers/fake-kube/pro-server-for-file.js';
import { cli } from '../helpers/leoflow-process.js';
import { sh } from '../helpers/map-dag.js';

/**
 * The completion cache and LEOFLOW_IDEMPOTENCY_KEY on the kubernetes executor (fake API server, each
 * pod running the real `leoflow agent --once`): a cached task's second run makes no pod, and its
 * downstream pod gets the first run's output.
 */
const NS = 'leoflow';
const MAKE = `printf '{"run": "%s", "key": "%s"}' "$LEOFLOW_RUN_ID" "$LEOFLOW_IDEMPOTENCY_KEY" > "$LEOFLOW_OUTPUT"`;
const USE = `cat "$LEOFLOW_INPUTS" > "$LEOFLOW_OUTPUT"`;
const f = proServerForFile({ namespace: NS, args: ['--kill-grace', '2s'], tmpPrefix: 'leoflow-kube-cache-' });

async function trigger(extra: string[] = []): Promise<string> {
  const runId = await triggerByCli(f.server.url, 'kube_cache', ['--conf', '{"day": "d1"}', ...extra]);
  await expectRunSucceeds(f.db.sql, runId, 60_000);
  return runId;
}

async function used(runId: string): Promise<{ make: { run: string; key: string } }> {
  const out = await cli(f.server.url, ['run', 'output', runId, 'use']);
  expect(out.code, out.stderr).toBe(0);
  return JSON.parse(out.stdout);
}

describe('the completion cache on the kubernetes executor', () => {
  it('makes no pod for a cached task; its downstream pod gets the cached output', { timeout: 150_000 }, async () => {
    await applyDag(f.server.url, f.tmp, [
      'dag_id: kube_cache',
      'tasks:',
      '  - id: make',
      `    command: ${JSON.stringify(sh(MAKE))}`,
      '    cache: { key: conf.day, ttl: 1h }',
      '  - id: use',
      '    depends_on: [make]',
      `    command: ${JSON.stringify(sh(USE))}`,
    ]);
    const first = await trigger();
    const install = await installIdentity(f.db.sql);
    expect(await used(first)).toEqual({ make: { run: first, key: idempotencyKey(install, first, 'make') } });
    const second = await trigger();
    expect((await used(second)).make.run).toBe(first);
    const [pod] = await f.db.sql<{ n: number }[]>`
      select count(*)::int as n from events e join task_instances t on t.id = e.ti_id
      where t.run_id = ${second} and t.task_id = 'make' and e.kind = 'ti.state' and e.payload ->> 'to' = 'running'`;
    const [cached] = await f.db.sql<{ n: number }[]>`
      select count(*)::int as n from task_cache_hits h join task_instances t on t.id = h.ti_id
      where t.run_id = ${second} and t.task_id = 'make'`;
    expect({ started: pod!.n, cached: cached!.n }).toEqual({ started: 0, cached: 1 });
    const third = await trigger(['--no-cache']);
    expect((await used(third)).make.run).toBe(third);
  });
});
