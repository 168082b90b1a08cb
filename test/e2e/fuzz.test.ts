import http2 from 'node:http2';
import { create, toBinary, toJsonString, ScalarType, type DescMessage, type DescService } from '@bufbuild/protobuf';
import { Code, ConnectError, createClient } from '@connectrpc/connect';
import { createGrpcTransport } from '@connectrpc/connect-node';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentService, AttemptOutcome } from '../../src/gen/leoflow/v1/agent_pb.js';
import { ClusterService } from '../../src/gen/leoflow/v1/cluster_pb.js';
import { RunState } from '../../src/gen/leoflow/v1/types_pb.js';
import { WorkflowService } from '../../src/gen/leoflow/v1/workflow_pb.js';
import { startAgent, waitFor, type AgentProcess } from '../helpers/leoflow-process.js';
import { AsyncInbox, type AgentMessage } from '../helpers/scripted-agent.js';
import { serverForFile } from '../helpers/server-fixture.js';
import { runEndsByApi } from '../helpers/api-run-ends.js';

/**
 * Issue 25's fuzz test: random and mutated protobuf and JSON bodies to every RPC of the Workflow
 * and Cluster services (taken from their descriptors, so a new RPC is fuzzed without being listed),
 * and random message sequences on AgentService.Connect. Bad input never gets INTERNAL, a refused
 * request writes nothing, the server stays up, and a healthy agent on the same server runs its
 * task to success meanwhile. Bounded by a fixed seed, case count and time.
 */

const SEED = 25;
const RUNS = 40;
const TIME_LIMIT_MS = 25_000;

let agent: AgentProcess;
let session: http2.ClientHttp2Session;

const f = serverForFile();

beforeAll(async () => {
  session = http2.connect(f.server.url);
  agent = startAgent(f.server.url, ['--id', 'healthy', '--labels', 'role=healthy']);
  await waitFor(
    'the healthy agent connected',
    async () => (await f.api.cluster.listAgents({})).agents.some((a) => a.agentId === 'healthy' && a.connected),
    20_000,
  );
  await f.api.workflow.applyDag({
    source:
      'dag_id: healthy\ntasks:\n  - id: work\n    executor: agents\n    placement: { labels: { role: healthy } }\n    command: ["sh", "-c", "sleep 4; echo healthy-done"]\n',
    filename: 'healthy.yaml',
  });
}, 60_000);

afterAll(async () => {
  session?.close();
  await agent?.stop(5000);
});

async function rowCounts() {
  const [row] = await f.db
    .sql`select (select count(*)::int from dags) as dags, (select count(*)::int from dag_runs) as runs, (select count(*)::int from task_instances) as tis`;
  return row;
}

/** One raw Connect-protocol call: the error code of the answer, or 'ok'. */
function call(path: string, contentType: string, body: Uint8Array, streaming: boolean): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = session.request({ ':method': 'POST', ':path': path, 'content-type': contentType });
    const chunks: Buffer[] = [];
    let status = 0;
    // A watch that a body leaves valid (WatchRuns of everything, say) follows until the caller
    // stops: a stream answered 200 and still open at the deadline is a healthy follow, not a hang.
    const timer = setTimeout(
      () => {
        req.close();
        resolve(streaming && status === 200 ? 'open' : 'timeout');
      },
      streaming ? 3_000 : 10_000,
    );
    req.on('response', (h) => (status = Number(h[':status'])));
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    req.on('end', () => {
      clearTimeout(timer);
      const all = Buffer.concat(chunks);
      if (!streaming) {
        resolve(
          status === 200 ? 'ok' : ((JSON.parse(all.toString() || '{}') as { code?: string }).code ?? `http ${status}`),
        );
        return;
      }
      // The end-of-stream envelope (flag 2) carries the error, if any.
      for (let at = 0; at + 5 <= all.length;) {
        const len = all.readUInt32BE(at + 1);
        if (all[at]! & 2) {
          const end = JSON.parse(all.subarray(at + 5, at + 5 + len).toString() || '{}') as {
            error?: { code?: string };
          };
          resolve(end.error?.code ?? 'ok');
          return;
        }
        at += 5 + len;
      }
      resolve(`http ${status}`);
    });
    req.end(body);
  });
}

function envelope(message: Uint8Array): Uint8Array {
  const head = Buffer.alloc(5);
  head.writeUInt32BE(message.length, 1);
  return Buffer.concat([head, message]);
}

/** Strings a hostile client sends: NUL, lone surrogates, long, empty, plausible ids. */
const hostileString = fc.oneof(
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.string({ maxLength: 20 }).map((s) => `${s}\0`),
  fc.constantFrom(
    '\ud800',
    'a\udfff',
    '',
    '1',
    '0',
    '-1',
    'healthy',
    '9223372036854775808',
    '{}',
    '{"a":"\\ud800"}',
    '[]',
  ),
  fc.integer({ min: 200, max: 5000 }).map((n) => 'x'.repeat(n)),
);

/** A message of `desc` with its string and number fields set at random (nested messages left empty). */
function messageOf(desc: DescMessage): fc.Arbitrary<Record<string, unknown>> {
  const fields: Record<string, fc.Arbitrary<unknown>> = {};
  for (const f of desc.fields) {
    if (f.oneof) continue;
    if (f.fieldKind === 'scalar' && f.scalar === ScalarType.STRING) fields[f.localName] = hostileString;
    else if (f.fieldKind === 'scalar' && (f.scalar === ScalarType.INT32 || f.scalar === ScalarType.UINT32))
      fields[f.localName] = f.scalar === ScalarType.INT32 ? fc.integer() : fc.nat();
    else if (f.fieldKind === 'scalar' && f.scalar === ScalarType.BOOL) fields[f.localName] = fc.boolean();
  }
  return fc.record(fields, { requiredKeys: [] });
}

interface Body {
  method: string;
  streaming: boolean;
  contentType: string;
  bytes: Uint8Array;
}

/** A body for a method: random bytes, a random message as protobuf or JSON, or one with bytes flipped. */
function bodyFor(service: DescService): fc.Arbitrary<Body> {
  return fc.constantFrom(...service.methods).chain((m) => {
    const streaming = m.methodKind !== 'unary';
    const path = `/${service.typeName}/${m.name}`;
    const wrap = (b: Uint8Array) => (streaming ? envelope(b) : b);
    const type = (json: boolean) =>
      streaming
        ? json
          ? 'application/connect+json'
          : 'application/connect+proto'
        : json
          ? 'application/json'
          : 'application/proto';
    const valid = messageOf(m.input).map((init) => create(m.input, init));
    return fc.oneof(
      fc
        .uint8Array({ maxLength: 64 })
        .map((b) => ({ method: path, streaming, contentType: type(false), bytes: wrap(b) })),
      valid.map((msg) => ({ method: path, streaming, contentType: type(false), bytes: wrap(toBinary(m.input, msg)) })),
      valid.map((msg) => ({
        method: path,
        streaming,
        contentType: type(true),
        bytes: wrap(Buffer.from(toJsonString(m.input, msg))),
      })),
      fc
        .tuple(valid, fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 })), { minLength: 1, maxLength: 4 }))
        .map(([msg, flips]) => {
          const b = Buffer.from(toBinary(m.input, msg));
          for (const [at, v] of flips) if (b.length > 0) b[at % b.length] = v;
          return { method: path, streaming, contentType: type(false), bytes: wrap(b) };
        }),
      fc
        .string({ maxLength: 60 })
        .map((s) => ({ method: path, streaming, contentType: type(true), bytes: wrap(Buffer.from(s)) })),
    );
  });
}

/** The run triggered before the fuzzing still succeeded, and the server logged no error meanwhile. */
async function expectHealthyRunSucceededQuietly(runId: string): Promise<void> {
  const ended = await runEndsByApi(f.api, runId, 'the healthy run ended');
  expect(RunState[ended.state]).toBe('SUCCESS');
  expect(f.server.logs.filter((l) => Number(l.level) >= 50)).toEqual([]);
}

describe('fuzzing the API', () => {
  it('never answers INTERNAL, writes nothing when it refuses, and a healthy agent runs its task meanwhile', async () => {
    const healthyRun = (await f.api.workflow.triggerRun({ dagId: 'healthy' })).run!.runId;
    const codes = new Map<string, number>();
    for (const service of [WorkflowService, ClusterService]) {
      await fc.assert(
        fc.asyncProperty(bodyFor(service), async (b) => {
          const before = await rowCounts();
          const code = await call(b.method, b.contentType, b.bytes, b.streaming);
          codes.set(code, (codes.get(code) ?? 0) + 1);
          expect(
            code,
            `${b.method} ${b.contentType} ${Buffer.from(b.bytes).toString('hex').slice(0, 200)}`,
          ).not.toMatch(/^(internal|unknown|timeout|http )/);
          if (code !== 'ok') expect(await rowCounts()).toEqual(before);
        }),
        { seed: SEED, numRuns: RUNS, interruptAfterTimeLimit: TIME_LIMIT_MS },
      );
    }
    expect(codes.get('invalid_argument') ?? 0).toBeGreaterThan(0);
    expect(f.server.child.exitCode).toBeNull();
    expect((await f.api.workflow.listDags({})).dags.map((d) => d.dagId)).toContain('healthy');
    await expectHealthyRunSucceededQuietly(healthyRun);
  }, 120_000);
});

const ref = fc.record({
  // An int64 on the wire: any value it can hold.
  tiId: fc.oneof(fc.constantFrom('1', '0', '-3'), fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }).map(String)),
  tryNumber: fc.integer({ min: -2, max: 3 }),
  attemptToken: fc.oneof(fc.uuid(), hostileString),
});

/** One message an agent (broken or hostile) might send. */
const agentMessage: fc.Arbitrary<AgentMessage> = fc.oneof(
  fc
    .record({
      agentId: hostileString,
      incarnationId: fc.oneof(fc.uuid(), hostileString),
      slots: fc.integer({ min: -1, max: 20_000 }),
      protocolVersion: fc.integer({ min: 0, max: 3 }),
      labels: fc.dictionary(hostileString, hostileString, { maxKeys: 3 }),
      capabilities: fc.array(hostileString, { maxLength: 3 }),
    })
    .map((value) => ({ msg: { case: 'hello' as const, value } })),
  fc
    .record({ seq: fc.bigInt({ min: 0n, max: 10n }), held: fc.array(ref, { maxLength: 2 }) })
    .map((value) => ({ msg: { case: 'keepalive' as const, value } })),
  fc.record({ attempt: ref, pid: fc.integer() }).map((value) => ({ msg: { case: 'started' as const, value } })),
  fc
    .record({
      attempt: ref,
      entries: fc.array(
        fc.record({ seq: fc.integer({ min: -1, max: 5 }), stream: hostileString, line: hostileString }),
        { maxLength: 3 },
      ),
    })
    .map((value) => ({ msg: { case: 'log' as const, value } })),
  fc
    .record({
      attempt: ref,
      outcome: fc.constantFrom(...(Object.values(AttemptOutcome).filter((v) => typeof v === 'number') as number[]), 99),
      exitCode: fc.option(fc.integer(), { nil: undefined }),
      signal: hostileString,
      error: hostileString,
    })
    .map((value) => ({ msg: { case: 'finished' as const, value } })),
  fc.constant({ msg: { case: undefined } }),
) as fc.Arbitrary<AgentMessage>;

describe('fuzzing AgentService.Connect', () => {
  it('ends a bad stream with a clear code, never INTERNAL, and the healthy agent keeps working', async () => {
    const client = createClient(AgentService, createGrpcTransport({ baseUrl: f.server.url }));
    const healthyRun = (await f.api.workflow.triggerRun({ dagId: 'healthy' })).run!.runId;
    await fc.assert(
      fc.asyncProperty(fc.array(agentMessage, { minLength: 1, maxLength: 5 }), async (messages) => {
        const outbox = new AsyncInbox<AgentMessage>();
        for (const m of messages) outbox.push(m);
        const ac = new AbortController();
        // A stream the server accepts stays open: it is closed from here after a short while.
        const timer = setTimeout(() => outbox.close(), 300);
        try {
          for await (const _ of client.connect(outbox, { signal: ac.signal, timeoutMs: 5000 })) void _;
        } catch (err) {
          const ce = ConnectError.from(err);
          expect(
            Code[ce.code],
            `${ce.message} after ${JSON.stringify(messages, (_k, v: unknown) => (typeof v === 'bigint' ? String(v) : v)).slice(0, 400)}`,
          ).not.toMatch(/^(Internal|Unknown)$/);
        } finally {
          clearTimeout(timer);
          ac.abort();
        }
      }),
      { seed: SEED, numRuns: RUNS, interruptAfterTimeLimit: TIME_LIMIT_MS },
    );
    expect(f.server.child.exitCode).toBeNull();
    await expectHealthyRunSucceededQuietly(healthyRun);
  }, 120_000);
});
