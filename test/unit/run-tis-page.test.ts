import { describe, expect, it } from 'vitest';
import type { PagedTi, TiPageStart } from '../../src/db/run-tis-page.js';
import { parseTiPageToken, readTiPage } from '../../src/server/api/run-tis-page.js';

/** A run of `own` task instances (ids 1…) whose task `m` (id 2) maps `items` items (ids 1000…). */
function fakeRun(own: number, items: number, error = '') {
  const base = {
    run_id: '7',
    state: 'success' as const,
    try_number: 1,
    max_tries: 1,
    executor: 'subprocess',
    agent_id: null,
    queued_at: null,
    started_at: null,
    heartbeat_at: null,
    ended_at: null,
    exit_code: 0,
    signal: null,
    error,
    pending_reason: null,
    next_try_at: null,
    deadline_at: null,
    deadline_state: null,
  };
  const tis: PagedTi[] = [
    ...Array.from({ length: own }, (_, i) => ({
      ...base,
      id: String(i + 1),
      task_id: `t${i + 1}`,
      map_count: i + 1 === 2 ? items : null,
      map_parent: null,
      map_index: null,
    })),
    ...Array.from({ length: items }, (_, i) => ({
      ...base,
      id: String(1000 + i),
      task_id: `t2[${i}]`,
      map_count: null,
      map_parent: '2',
      map_index: i,
    })),
  ];
  const reads: number[] = [];
  const read = async (start: TiPageStart | null, limit: number): Promise<PagedTi[]> => {
    reads.push(limit);
    const from =
      start === null
        ? 0
        : tis.findIndex((t) =>
            start.kind === 'own'
              ? t.id === start.afterId
              : t.map_parent === start.parentId && t.map_index === start.afterIndex,
          ) + 1;
    return tis.slice(from, from + limit);
  };
  return { tis, read, reads };
}

async function allPages(run: ReturnType<typeof fakeRun>, pageSize: number): Promise<string[][]> {
  const pages: string[][] = [];
  let token = '';
  do {
    const p = await readTiPage(run.read, parseTiPageToken(token), pageSize);
    pages.push(p.tis.map((t) => t.task_id));
    token = p.nextPageToken;
  } while (token !== '' && pages.length < 1000);
  return pages;
}

describe("GetRun's pages of task instances", () => {
  it('cuts pages at page_size, across own and mapped instances, each once and in order', async () => {
    const run = fakeRun(3, 4);
    expect(await allPages(run, 3)).toEqual([['t1', 't2', 't3'], ['t2[0]', 't2[1]', 't2[2]'], ['t2[3]']]);
    expect(await allPages(run, 0)).toEqual([run.tis.map((t) => t.task_id)]);
  });

  it('stops a page before 3 MiB and never answers an empty page', async () => {
    // Task instances of ~1 KiB each: 3 MiB holds about 3,000 of them.
    const run = fakeRun(2, 10_000, 'e'.repeat(1000));
    const pages = await allPages(run, 0);
    expect(pages.length).toBe(4);
    expect(pages.slice(0, -1).every((p) => p.length > 2900 && p.length < 3100)).toBe(true);
    expect(pages.flat()).toEqual(run.tis.map((t) => t.task_id));
    const huge = fakeRun(1, 0, 'e'.repeat(4 * 1024 * 1024));
    expect((await readTiPage(huge.read, null, 0)).tis).toHaveLength(1);
  });

  it('fills a page of small task instances from several reads of 10,000', async () => {
    const run = fakeRun(2, 30_000);
    const page = await readTiPage(run.read, null, 25_000);
    expect(page.tis.map((t) => t.task_id)).toEqual(run.tis.slice(0, 25_000).map((t) => t.task_id));
    expect(run.reads).toEqual([10_001, 10_001, 5_001]);
    expect(page.nextPageToken).toBe('m2:24997');
  });

  it('refuses a token it did not give', () => {
    expect(parseTiPageToken('')).toBeNull();
    expect(parseTiPageToken('t12')).toEqual({ kind: 'own', afterId: '12' });
    expect(parseTiPageToken('m12:0')).toEqual({ kind: 'mapped', parentId: '12', afterIndex: 0 });
    for (const bad of ['x', 't', 't0', 'm1', 'm1:-1', 'm1:01', 't1 ', '12'])
      expect(() => parseTiPageToken(bad), bad).toThrow(/page_token/);
  });
});
