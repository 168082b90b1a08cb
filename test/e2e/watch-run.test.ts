import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import type { RunEvent } from '../../src/gen/leoflow/v1/workflow_pb.js';
import { cli, startServer, waitFor, type ServerProcess } from '../helpers/leoflow-process.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';

/**
 * WatchRun end to end (issue 26): a run followed live from trigger to end with every state change
 * in order; a watch resumed on another replica (two servers on one database) from its last seq
 * with no gap and nothing twice; `run watch` without a terminal (plain lines) and with -o json.
 */

let db: TestDatabase;
let tmp: string;
const servers: ServerProcess[] = [];

const YAML = `dag_id: chain
tasks:
  - id: a
    command: ["sh", "-c", "sleep 0.3"]
  - id: b
    command: ["sh", "-c", "sleep 0.3"]
    depends_on: [a]
  - id: c
    command: ["true"]
    depends_on: [b]
`;

beforeAll(async () => {
  db = await createTestDatabase();
  tmp = await mkdtemp(path.join(os.tmpdir(), 'leoflow-watch-'));
  await writeFile(path.join(tmp, 'chain.yaml'), YAML);
  servers.push(await startServer({ env: { DATABASE_URL: db.url }, args: ['--replica-id', 'one'] }));
  servers.push(await startServer({ env: { DATABASE_URL: db.url }, args: ['--replica-id', 'two'] }));
  const r = await cli(servers[0]!.url, ['dag', 'apply', path.join(tmp, 'chain.yaml')]);
  expect(r.code, r.stderr).toBe(0);
}, 60_000);

afterAll(async () => {
  for (const s of servers) await s.stop();
  await db?.drop();
  await rm(tmp, { recursive: true, force: true });
});

/** Every event of the run in the log, in seq order. */
async function logged(runId: string): Promise<string[]> {
  const rows = await db.sql<
    { seq: string }[]
  >`select seq::text as seq from events where run_id = ${runId} order by events.seq`;
  return rows.map((r) => r.seq);
}

describe('WatchRun', () => {
  it('follows a run live from trigger to end: every state change, in order, then the stream ends', async () => {
    const api = createClients(servers[0]!.url);
    const { run } = await api.workflow.triggerRun({ dagId: 'chain', confJson: '', runKey: '' });
    const got: RunEvent[] = [];
    for await (const res of api.workflow.watchRun({ runId: run!.runId, afterSeq: '0', follow: false }))
      got.push(...res.events);
    const seqs = got.map((e) => e.seq);
    expect(seqs).toEqual(await logged(run!.runId));
    expect(new Set(seqs).size).toBe(seqs.length);
    const tiMoves = (task: string) =>
      got
        .filter((e) => e.kind === 'ti.state' && JSON.parse(e.payloadJson).task_id === task)
        .map((e) => JSON.parse(e.payloadJson).to);
    for (const t of ['a', 'b', 'c']) expect(tiMoves(t)).toContain('running');
    for (const t of ['a', 'b', 'c']) expect(tiMoves(t).at(-1)).toBe('success');
    const last = got.at(-1)!;
    expect(last.kind).toBe('run.state');
    expect(JSON.parse(last.payloadJson).to).toBe('success');
  }, 30_000);

  it('replays from a middle seq, and resumes on the other replica with no gap and nothing twice', async () => {
    const one = createClients(servers[0]!.url);
    const two = createClients(servers[1]!.url);
    const { run } = await one.workflow.triggerRun({ dagId: 'chain', confJson: '', runKey: '' });
    // Half the events from replica one, then the rest from replica two after the last seq seen.
    const first: RunEvent[] = [];
    const ac = new AbortController();
    try {
      for await (const res of one.workflow.watchRun(
        { runId: run!.runId, afterSeq: '0', follow: false },
        { signal: ac.signal },
      )) {
        first.push(...res.events);
        if (first.length >= 3) break;
      }
    } finally {
      ac.abort();
    }
    const rest: RunEvent[] = [];
    for await (const res of two.workflow.watchRun({ runId: run!.runId, afterSeq: first.at(-1)!.seq, follow: false }))
      rest.push(...res.events);
    const all = [...first, ...rest].map((e) => e.seq);
    expect(all).toEqual(await logged(run!.runId));
    expect(new Set(all).size).toBe(all.length);
    // A replay from the middle of a finished run is the log's tail.
    const log = await logged(run!.runId);
    const tail: string[] = [];
    for await (const res of two.workflow.watchRun({ runId: run!.runId, afterSeq: log[2]!, follow: false }))
      tail.push(...res.events.map((e) => e.seq));
    expect(tail).toEqual(log.slice(3));
    // Resumed after the last event of the ended run: the stream ends at once, empty.
    const none: string[] = [];
    for await (const res of two.workflow.watchRun({ runId: run!.runId, afterSeq: log.at(-1)!, follow: false }))
      none.push(...res.events.map((e) => e.seq));
    expect(none).toEqual([]);
  }, 30_000);

  it('WatchRuns streams the events of one DAG runs as they commit, and refuses an unknown DAG', async () => {
    const api = createClients(servers[1]!.url);
    const [row] = await db.sql<{ last: string }[]>`select coalesce(max(seq), 0)::text as last from events`;
    const last = row!.last;
    const ac = new AbortController();
    const got: RunEvent[] = [];
    const reading = (async () => {
      try {
        for await (const res of api.workflow.watchRuns({ dagId: 'chain', afterSeq: last }, { signal: ac.signal })) {
          got.push(...res.events);
          if (got.some((e) => e.kind === 'run.state' && JSON.parse(e.payloadJson).to === 'success')) return;
        }
      } catch {
        // aborted
      }
    })();
    const { run } = await createClients(servers[0]!.url).workflow.triggerRun({
      dagId: 'chain',
      confJson: '',
      runKey: '',
    });
    await Promise.race([reading, new Promise((r) => setTimeout(r, 20_000))]);
    ac.abort();
    expect(got.every((e) => e.dagId === 'chain' && e.runId === run!.runId)).toBe(true);
    expect(got.map((e) => e.seq)).toEqual(await logged(run!.runId));
    let refused = '';
    try {
      for await (const _ of api.workflow.watchRuns({ dagId: 'nope', afterSeq: '0' })) void _;
    } catch (err) {
      refused = (err as Error).message;
    }
    expect(refused).toContain('DAG "nope" not found');
  }, 30_000);

  it('refuses an unknown run and a bad cursor clearly', async () => {
    const api = createClients(servers[0]!.url);
    const read = async (req: { runId: string; afterSeq: string }) => {
      try {
        for await (const _ of api.workflow.watchRun({ ...req, follow: false })) void _;
        return 'ok';
      } catch (err) {
        return (err as Error).message;
      }
    };
    expect(await read({ runId: '999999', afterSeq: '0' })).toContain('run 999999 not found');
    expect(await read({ runId: '1', afterSeq: '-5' })).toContain('after_seq');
  });

  it('run watch prints one line per move without a terminal, and one event per line with -o json', async () => {
    const api = createClients(servers[0]!.url);
    const { run } = await api.workflow.triggerRun({ dagId: 'chain', confJson: '', runKey: '' });
    const plain = await cli(servers[1]!.url, ['run', 'watch', run!.runId]);
    expect(plain.code, plain.stderr).toBe(0);
    for (const t of ['a', 'b', 'c']) expect(plain.stdout).toMatch(new RegExp(`\\b${t}\\s+success\\s+try 1/`));
    expect(plain.stdout).toMatch(new RegExp(`run ${run!.runId} success in \\d+(\\.\\d)?m?s: 3 success`));
    const json = await cli(servers[1]!.url, ['run', 'watch', run!.runId, '-o', 'json']);
    expect(json.code, json.stderr).toBe(0);
    const events = json.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { seq: string; kind: string; to: string });
    expect(events.map((e) => e.seq)).toEqual(await logged(run!.runId));
    expect(events.at(-1)).toMatchObject({ kind: 'run.state', to: 'success' });
    // --after without a terminal: only the moves after that seq (c's), as with -o json.
    const cMoves = events.filter((e) => e.kind === 'ti.state' && (e as { task_id?: string }).task_id === 'c');
    const after = events[events.indexOf(cMoves[0]!) - 1]!.seq;
    const resumed = await cli(servers[1]!.url, ['run', 'watch', run!.runId, '--after', after]);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(resumed.stdout).toMatch(/\bc\s+success\s+try 1\//);
    expect(resumed.stdout).not.toMatch(/\b[ab]\s+(queued|running|success)\s/);
    // The tasks done count from the run's states when the watch begins: a and b had ended.
    expect(resumed.stdout).toMatch(/\bc\s+scheduled\s+\[2\/3 done\]/);
  }, 30_000);
});
