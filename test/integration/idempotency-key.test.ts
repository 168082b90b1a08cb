import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { idempotencyKey } from '../../src/core/idempotency-key.js';
import { installIdentity } from '../../src/db/install-identity.js';
import { cli } from '../helpers/leoflow-process.js';
import { runEnds } from '../helpers/run-ends.js';
import { replicasForFile } from '../helpers/server-fixture.js';

/**
 * A Lite server (subprocess executor, shipped defaults) gives each attempt LEOFLOW_IDEMPOTENCY_KEY:
 * the tasks record `task try key` in a file; `flaky` fails its first try.
 */
const f = replicasForFile({ tmpPrefix: 'leoflow-idempotency-' });
const start = f.launcher([]);

describe('LEOFLOW_IDEMPOTENCY_KEY on the subprocess executor', () => {
  it('is the same across tries, differs across tasks and runs, and is the install-wide hash', async () => {
    const server = await start();
    const ran = path.join(f.tmp, 'ran');
    const record = `echo $LEOFLOW_RUN_ID $LEOFLOW_TASK_ID $LEOFLOW_TRY_NUMBER $LEOFLOW_IDEMPOTENCY_KEY >> ${ran}`;
    const file = path.join(f.tmp, 'keys.yaml');
    await writeFile(
      file,
      [
        'dag_id: keys',
        'tasks:',
        '  - id: flaky',
        `    command: ["sh", "-c", "${record}; [ \\"$LEOFLOW_TRY_NUMBER\\" -ge 2 ]"]`,
        '    retries: 1',
        '    retry_delay: 100ms',
        '  - id: other',
        `    command: ["sh", "-c", "${record}"]`,
        '',
      ].join('\n'),
    );
    expect((await cli(server.url, ['dag', 'apply', file])).code).toBe(0);
    const runs: string[] = [];
    for (let i = 0; i < 2; i++) {
      const t = await cli(server.url, ['run', 'trigger', 'keys', '-o', 'json']);
      expect(t.code, t.stderr).toBe(0);
      runs.push(JSON.parse(t.stdout).run_id as string);
      expect(await runEnds(f.db.sql, runs[i]!)).toBe('success');
    }
    const lines = (await readFile(ran, 'utf8'))
      .trim()
      .split('\n')
      .map((l) => l.split(' '));
    expect(lines).toHaveLength(6);
    const install = await installIdentity(f.db.sql);
    for (const [runId, taskId, , key] of lines) expect(key).toBe(idempotencyKey(install, runId!, taskId!));
    const flakyOfRun0 = lines.filter(([r, t]) => r === runs[0] && t === 'flaky');
    expect(flakyOfRun0.map((l) => l[2])).toEqual(['1', '2']);
    expect(flakyOfRun0[0]![3]).toBe(flakyOfRun0[1]![3]);
    expect(new Set(lines.map((l) => `${l[0]} ${l[1]}`)).size).toBe(new Set(lines.map((l) => l[3])).size);
  });
});
