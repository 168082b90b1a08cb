import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { idempotencyKey } from '../../src/core/idempotency-key.js';
import { installIdentity } from '../../src/db/install-identity.js';
import { proServerForFile } from '../helpers/fake-kube/pro-server-for-file.js';
import { cli } from '../helpers/leoflow-process.js';
import { runEnds } from '../helpers/run-ends.js';

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
  const t = await cli(f.server.url, [
    'run',
    'trigger',
    'kube_cache',
    '--conf',
    '{"day": "d1"}',
    '-o',
    'json',
    ...extra,
  ]);
  expect(t.code, t.stderr).toBe(0);
  const runId = JSON.parse(t.stdout).run_id as string;
  const state = await runEnds(f.db.sql, runId, { timeoutMs: 60_000 });
  const tis = await f.db.sql`select task_id, state, error from task_instances where run_id = ${runId}`;
  expect(state, JSON.stringify(tis)).toBe('success');
  return runId;
}

async function used(runId: string): Promise<{ make: { run: string; key: string } }> {
  const out = await cli(f.server.url, ['run', 'output', runId, 'use']);
  expect(out.code, out.stderr).toBe(0);
  return JSON.parse(out.stdout);
}

describe('the completion cache on the kubernetes executor', () => {
  it('makes no pod for a cached task; its downstream pod gets the cached output', { timeout: 150_000 }, async () => {
    const file = path.join(f.tmp, 'kube-cache.yaml');
    await writeFile(
      file,
      [
        'dag_id: kube_cache',
        'tasks:',
        '  - id: make',
        `    command: ["sh", "-c", ${JSON.stringify(MAKE)}]`,
        '    cache: { key: conf.day, ttl: 1h }',
        '  - id: use',
        '    depends_on: [make]',
        `    command: ["sh", "-c", ${JSON.stringify(USE)}]`,
        '',
      ].join('\n'),
    );
    const applied = await cli(f.server.url, ['dag', 'apply', file]);
    expect(applied.code, applied.stderr + applied.stdout).toBe(0);
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
