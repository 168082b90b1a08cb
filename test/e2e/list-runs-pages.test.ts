import { Code, ConnectError } from '@connectrpc/connect';
import { beforeAll, describe, expect, it } from 'vitest';
import { cli } from '../helpers/leoflow-process.js';
import { serverForFile } from '../helpers/server-fixture.js';

/**
 * Issue 38: ListRuns with limit 100 answered 6.6 MB when runs carried large confs, past the 4 MiB
 * a default gRPC client accepts. A page now stops at 3 MiB and says where the next one starts.
 */

const RUNS = 100;

const f = serverForFile();

beforeAll(async () => {
  await f.api.workflow.applyDag({
    source: 'dag_id: heavy\ntasks:\n  - id: t\n    command: ["true"]\n',
    filename: 'heavy.yaml',
  });
  // Paused: the runs stay queued, so the test measures pages, not work.
  await f.api.workflow.pauseDag({ dagId: 'heavy', paused: true });
  const conf = JSON.stringify({ blob: 'x'.repeat(60 * 1024) });
  for (let i = 0; i < RUNS; i++) await f.api.workflow.triggerRun({ dagId: 'heavy', runKey: `k${i}`, confJson: conf });
});

describe('ListRuns pages', () => {
  it('stops a page at 3 MiB and names the next, so every run is read once, newest first', async () => {
    const seen: string[] = [];
    const sizes: number[] = [];
    let token = '';
    for (let page = 0; page < 10; page++) {
      const r = await f.api.workflow.listRuns({ dagId: 'heavy', limit: 100, pageToken: token });
      sizes.push(r.runs.length);
      seen.push(...r.runs.map((x) => x.runId));
      token = r.nextPageToken;
      if (!token) break;
    }
    expect(sizes.length).toBeGreaterThan(1);
    expect(sizes[0]).toBeLessThan(RUNS);
    expect(new Set(seen).size).toBe(RUNS);
    expect(seen).toEqual([...seen].sort((a, b) => Number(b) - Number(a)));
    // A page the limit ends (and no more runs): no token.
    const last = await f.api.workflow.listRuns({ dagId: 'heavy', limit: 5, pageToken: seen[RUNS - 6] });
    expect(last.runs.map((x) => x.runId)).toEqual(seen.slice(RUNS - 5));
    expect(last.nextPageToken).toBe('');
  });

  it('`leoflow run list --limit` follows the pages up to its limit', async () => {
    const r = await cli(f.server.url, ['run', 'list', '--dag', 'heavy', '--limit', '80', '-o', 'json'], {
      timeoutMs: 60_000,
    });
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toHaveLength(80);
  });

  it('names a bad page token', async () => {
    const err = await f.api.workflow.listRuns({ pageToken: 'abc' }).then(
      () => null,
      (e: unknown) => ConnectError.from(e),
    );
    expect(err?.code).toBe(Code.InvalidArgument);
    expect(err?.rawMessage).toBe('page_token: must be a positive integer id, got "abc"');
  });
});
