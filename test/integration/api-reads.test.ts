import { createContextValues } from '@connectrpc/connect';
import pino from 'pino';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectAgent } from '../../src/db/agents.js';
import type { Sql } from '../../src/db/sql.js';
import { createClusterService } from '../../src/server/api/cluster-service.js';
import type { LeaderElector } from '../../src/scheduler/leader.js';
import { workflowServiceOn } from '../helpers/workflow-service-on.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';

/**
 * The API's reads read only what they return. Every statement a list or get RPC sends is recorded
 * and explained (`EXPLAIN VERBOSE`), and the columns each plan node outputs are checked: no run's
 * DAG spec (1–10 KB a run, dropped by every response about runs and task instances) and no DAG's
 * file text. A check of the plans, not of the SQL text, so `select *` or a join that brings the
 * spec back is caught however it is written.
 */

const YAML = `dag_id: reads
tasks:
  - id: a
    command: ["true"]
  - id: b
    command: ["true"]
    depends_on: [a]
`;

type Handler = (req: never, ctx: never) => unknown;

let db: TestDatabase;
let pool: Sql;
const sent: { query: string; params: unknown[] }[] = [];
let workflow: Record<string, Handler>;
let cluster: Record<string, Handler>;
let runId: string;

beforeAll(async () => {
  db = await createTestDatabase();
  pool = postgres(db.url, {
    max: 2,
    types: {},
    onnotice: () => {},
    debug: (_c, query, params) => sent.push({ query, params: params as unknown[] }),
  }) as unknown as Sql;
  const logger = pino({ level: 'silent' });
  workflow = workflowServiceOn(pool, { logger }) as unknown as Record<string, Handler>;
  cluster = createClusterService({
    sql: pool,
    replicaId: 'r1',
    edition: 'lite',
    role: 'auto',
    leader: { leadingSince: null } as unknown as LeaderElector,
    health: { live: async () => ({ ok: true, checks: [] }), ready: async () => ({ ok: true, checks: [] }) },
    agentFreshMs: 10_000,
    heartbeatThresholdMs: 90_000,
    tickMs: 1000,
    dispatchQueue: () => ({ depth: 0, capacity: 1 }),
    lastFullStepAt: () => null,
    drained: () => {},
    forgotten: () => {},
  }) as unknown as Record<string, Handler>;
  await call(workflow.applyDag!, { source: YAML, filename: 'reads.yaml' });
  runId = (
    (await call(workflow.triggerRun!, { dagId: 'reads', confJson: '', runKey: '' })) as { run: { runId: string } }
  ).run.runId;
  await connectAgent(pool, {
    agentId: 'a1',
    labels: {},
    capabilities: [],
    slots: 1,
    replicaId: 'r1',
    sessionId: crypto.randomUUID(),
    protocolVersion: 2,
    incarnationId: crypto.randomUUID(),
    liveMs: 10_000,
  });
});

afterAll(async () => {
  await pool?.end({ timeout: 5 });
  await db?.drop();
});

async function call(handler: Handler, req: Record<string, unknown>): Promise<unknown> {
  const out = handler(
    req as never,
    { signal: new AbortController().signal, requestHeader: new Headers(), values: createContextValues() } as never,
  );
  if (out && typeof out === 'object' && Symbol.asyncIterator in out) {
    const all: unknown[] = [];
    for await (const m of out as AsyncIterable<unknown>) all.push(m);
    return all;
  }
  return out;
}

/** Every column or expression any node of the statement's plan outputs, by `EXPLAIN VERBOSE`;
 *  a scan's as `<table>:<output>`. */
async function outputsOf(s: { query: string; params: unknown[] }): Promise<string[]> {
  const [row] = await db.sql.unsafe(`explain (verbose, format json) ${s.query}`, s.params as never[]);
  const out: string[] = [];
  const walk = (node: { Output?: string[]; Plans?: unknown[]; 'Relation Name'?: string }) => {
    const table = node['Relation Name'];
    out.push(...(node.Output ?? []).map((o) => (table ? `${table}:${o}` : o)));
    for (const child of node.Plans ?? []) walk(child as typeof node);
  };
  walk((row as unknown as { 'QUERY PLAN': { Plan: never }[] })['QUERY PLAN'][0]!.Plan);
  return out;
}

/** The statements an RPC sent (answered or refused), with every output of their plans. */
async function readsOf(
  handler: Handler,
  req: Record<string, unknown>,
): Promise<{ statements: number; outputs: string[]; error?: unknown }> {
  sent.length = 0;
  let error: unknown;
  await call(handler, req).catch((err: unknown) => (error = err));
  const statements = [...sent];
  const outputs: string[] = [];
  for (const s of statements) outputs.push(...(await outputsOf(s)));
  return { statements: statements.length, outputs, error };
}

const mentions = (outputs: string[], column: RegExp) => outputs.filter((o) => column.test(o));
/** A run's spec snapshot, wherever it is read from. */
const RUN_SPEC = /\bspec\b/;
/** A DAG file's text. */
const DAG_SOURCE = /\bsource\b/;

describe('the API reads only the columns it returns', () => {
  const runRpcs: [string, () => [Handler, Record<string, unknown>]][] = [
    ['ListRuns', () => [workflow.listRuns!, { dagId: '', limit: 0, states: [] }]],
    ['ListRuns of a DAG', () => [workflow.listRuns!, { dagId: 'reads', limit: 0, states: [] }]],
    ['ListRuns of a DAG with no runs', () => [workflow.listRuns!, { dagId: 'nope', limit: 0, states: [] }]],
    ['GetRun', () => [workflow.getRun!, { runId }]],
    ['ListTaskInstances', () => [workflow.listTaskInstances!, { runId }]],
    ['TailLogs', () => [workflow.tailLogs!, { runId, taskId: 'a', tryNumber: 0, follow: false }]],
    ['ListAgents', () => [cluster.listAgents!, {}]],
  ];
  for (const [name, rpc] of runRpcs) {
    it(`${name} reads no run's spec and no DAG file`, async () => {
      const [handler, req] = rpc();
      const { statements, outputs, error } = await readsOf(handler, req);
      expect(error === undefined).toBe(!name.includes('no runs'));
      expect(statements).toBeGreaterThan(0);
      expect(mentions(outputs, RUN_SPEC)).toEqual([]);
      expect(mentions(outputs, DAG_SOURCE)).toEqual([]);
    });
  }

  it('ListRuns reads exactly the columns of a Run message, in one statement', async () => {
    const { statements, outputs } = await readsOf(workflow.listRuns!, { dagId: '', limit: 0, states: [] });
    expect(statements).toBe(1);
    const columns = new Set(
      outputs.filter((o) => o.startsWith('dag_runs:')).map((o) => o.replace(/^dag_runs:(\w+\.)?/, '')),
    );
    expect([...columns].sort()).toEqual([
      'conf',
      'created_at',
      'dag_id',
      'dag_version',
      'deadline_at',
      'deadline_state',
      'ended_at',
      'id',
      'logical_date',
      'run_key',
      'run_type',
      'started_at',
      'state',
      'traceparent',
    ]);
  });

  for (const [name, rpc] of [
    ['GetDag', () => [workflow.getDag!, { dagId: 'reads' }]],
    ['ListDags', () => [workflow.listDags!, {}]],
  ] as [string, () => [Handler, Record<string, unknown>]][]) {
    it(`${name} reads no DAG file`, async () => {
      const [handler, req] = rpc();
      const { statements, outputs } = await readsOf(handler, req);
      expect(statements).toBe(1);
      expect(mentions(outputs, DAG_SOURCE)).toEqual([]);
    });
  }
});
