import { timestampFromDate } from '@bufbuild/protobuf/wkt';
import { beforeAll, describe, expect, it } from 'vitest';
import { serverForFile } from '../helpers/server-fixture.js';

/**
 * Issue 39: the Runs page filters by creation date on the server, and its WatchRuns starts at the
 * seq its page was read at (ListRunsResponse.watch_seq), not by replaying the whole feed.
 */

const f = serverForFile();
const HOUR = 3_600_000;
const at = (ms: number) => timestampFromDate(new Date(Date.now() + ms));

beforeAll(async () => {
  await f.api.workflow.applyDag({
    source: 'dag_id: dated\ntasks:\n  - id: t\n    command: ["true"]\n',
    filename: 'dated.yaml',
  });
  // Paused: the runs stay queued, so no event of theirs follows their creation.
  await f.api.workflow.pauseDag({ dagId: 'dated', paused: true });
  for (let i = 0; i < 3; i++) await f.api.workflow.triggerRun({ dagId: 'dated', runKey: `d${i}` });
});

describe('ListRuns by date', () => {
  it('keeps the runs created in [created_from, created_to), with pages', async () => {
    const all = await f.api.workflow.listRuns({ dagId: 'dated', createdFrom: at(-HOUR), createdTo: at(HOUR) });
    expect(all.runs).toHaveLength(3);
    expect((await f.api.workflow.listRuns({ dagId: 'dated', createdFrom: at(HOUR) })).runs).toHaveLength(0);
    expect((await f.api.workflow.listRuns({ dagId: 'dated', createdTo: at(-HOUR) })).runs).toHaveLength(0);
    const first = await f.api.workflow.listRuns({ dagId: 'dated', createdFrom: at(-HOUR), limit: 2 });
    expect(first.runs).toHaveLength(2);
    const second = await f.api.workflow.listRuns({
      dagId: 'dated',
      createdFrom: at(-HOUR),
      limit: 2,
      pageToken: first.nextPageToken,
    });
    expect([...first.runs, ...second.runs].map((r) => r.runId)).toEqual(all.runs.map((r) => r.runId));
    expect(second.nextPageToken).toBe('');
  });

  it('gives the seq to watch from: a new run is seen, no earlier event is replayed', async () => {
    expect((await f.api.workflow.listRuns({ dagId: 'dated' })).watchSeq).toBe('0');
    const page = await f.api.workflow.listRuns({ dagId: 'dated', withWatchSeq: true });
    expect(BigInt(page.watchSeq)).toBeGreaterThan(0n);
    const fresh = await f.api.workflow.triggerRun({ dagId: 'dated', runKey: 'after-the-page' });
    const ctl = new AbortController();
    const seen: { seq: string; runId: string }[] = [];
    try {
      for await (const batch of f.api.workflow.watchRuns(
        { dagId: 'dated', afterSeq: page.watchSeq },
        { signal: ctl.signal },
      )) {
        seen.push(...batch.events);
        if (seen.some((e) => e.runId === fresh.run!.runId)) break;
      }
    } finally {
      ctl.abort();
    }
    expect(seen.every((e) => BigInt(e.seq) > BigInt(page.watchSeq))).toBe(true);
    expect(new Set(seen.map((e) => e.runId))).toEqual(new Set([fresh.run!.runId]));
  });
});
