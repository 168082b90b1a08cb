import http2 from 'node:http2';
import { readFile } from 'node:fs/promises';
import { Code, ConnectError } from '@connectrpc/connect';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClients, type Clients } from '../../src/cli/client.js';
import { MAX_CONF_JSON_BYTES, MAX_DAG_ISSUES_SHOWN, MAX_CONF_JSON_DEPTH, MAX_ID_CHARS, MAX_REQUEST_BYTES } from '../../src/core/limits.js';
import { ROOT, startServer, type ServerProcess } from '../helpers/leoflow-process.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';

/**
 * Issue 25's hostile client, replayed: each limit at its bound and one past it, and bad bytes
 * answered INVALID_ARGUMENT naming the field and the limit, never INTERNAL or a reset stream.
 */

let db: TestDatabase;
let server: ServerProcess;
let api: Clients;

beforeAll(async () => {
  db = await createTestDatabase();
  server = await startServer({ env: { DATABASE_URL: db.url } });
  api = createClients(server.url);
  await api.workflow.applyDag({ source: await readFile(`${ROOT}/examples/hello.yaml`, 'utf8'), filename: 'hello.yaml' });
});

afterAll(async () => {
  await server?.stop();
  await db?.drop();
});

async function failure(p: Promise<unknown>): Promise<ConnectError> {
  try {
    await p;
  } catch (err) {
    return ConnectError.from(err);
  }
  throw new Error('expected the call to fail');
}

async function rejects(p: Promise<unknown>, code: Code, message: RegExp): Promise<void> {
  const ce = await failure(p);
  expect(Code[ce.code], ce.message).toBe(Code[code]);
  expect(ce.rawMessage).toMatch(message);
}

async function counts() {
  const [row] = await db.sql`select (select count(*)::int from dags) as d, (select count(*)::int from dag_runs) as r, (select count(*)::int from task_instances) as t`;
  return row;
}

/** A Connect-protocol unary call with a raw body: the HTTP status and the error JSON. */
async function rawConnect(method: string, contentType: string, body: Buffer | string): Promise<{ status: number; body: { code?: string; message?: string } }> {
  const session = http2.connect(server.url);
  try {
    return await new Promise((resolve, reject) => {
      const req = session.request({ ':method': 'POST', ':path': `/leoflow.v1.WorkflowService/${method}`, 'content-type': contentType });
      let status = 0;
      const chunks: Buffer[] = [];
      req.on('response', (h) => (status = Number(h[':status'])));
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const text = Buffer.concat(chunks).toString();
        resolve({ status, body: text ? (JSON.parse(text) as { code?: string; message?: string }) : {} });
      });
      req.on('error', reject);
      req.end(body);
    });
  } finally {
    session.close();
  }
}

/** A conf object of exactly `bytes` bytes of JSON. */
function confOfSize(bytes: number): string {
  const base = '{"pad":""}';
  return `{"pad":"${'x'.repeat(bytes - base.length)}"}`;
}

describe('conf_json', () => {
  it('takes a conf of exactly the size limit and refuses one byte more, writing nothing', async () => {
    const atLimit = confOfSize(MAX_CONF_JSON_BYTES);
    expect(Buffer.byteLength(atLimit)).toBe(MAX_CONF_JSON_BYTES);
    expect((await api.workflow.triggerRun({ dagId: 'hello', confJson: atLimit })).created).toBe(true);
    const before = await counts();
    await rejects(api.workflow.triggerRun({ dagId: 'hello', confJson: confOfSize(MAX_CONF_JSON_BYTES + 1) }), Code.InvalidArgument, new RegExp(`^conf_json: is ${MAX_CONF_JSON_BYTES + 1} bytes, more than the limit of ${MAX_CONF_JSON_BYTES} bytes`));
    // Past the request size limit too (the client's own HTTP/2 session gives up near 10 MiB).
    await rejects(api.workflow.triggerRun({ dagId: 'hello', confJson: confOfSize(3 * 1024 * 1024) }), Code.ResourceExhausted, /larger than configured readMaxBytes/);
    expect(await counts()).toEqual(before);
  });

  it('takes nesting at the depth limit and refuses deeper, even 30,000 deep', async () => {
    const nested = (depth: number) => '{"a":'.repeat(depth - 1) + '{}' + '}'.repeat(depth - 1);
    expect((await api.workflow.triggerRun({ dagId: 'hello', confJson: nested(MAX_CONF_JSON_DEPTH) })).created).toBe(true);
    const before = await counts();
    await rejects(api.workflow.triggerRun({ dagId: 'hello', confJson: nested(MAX_CONF_JSON_DEPTH + 1) }), Code.InvalidArgument, new RegExp(`^conf_json: nests deeper than the limit of ${MAX_CONF_JSON_DEPTH} levels$`));
    await rejects(api.workflow.triggerRun({ dagId: 'hello', confJson: '['.repeat(30_000) + ']'.repeat(30_000) }), Code.InvalidArgument, /nests deeper than the limit/);
    expect(await counts()).toEqual(before);
  });

  it('refuses lone surrogates and NUL, escaped or raw', async () => {
    const before = await counts();
    await rejects(api.workflow.triggerRun({ dagId: 'hello', confJson: '{"a":"\\ud800"}' }), Code.InvalidArgument, /^conf_json: .*lone surrogate/);
    await rejects(api.workflow.triggerRun({ dagId: 'hello', confJson: '{"a":"\\u0000"}' }), Code.InvalidArgument, /^conf_json: .*NUL/);
    await rejects(api.workflow.triggerRun({ dagId: 'hello', confJson: '{"\\udfff":1}' }), Code.InvalidArgument, /^conf_json: .*lone surrogate/);
    // A lone surrogate in the request itself, as only a JSON body can carry it.
    const r = await rawConnect('TriggerRun', 'application/json', '{"dagId":"hello","confJson":"{\\"a\\":\\"\\ud800\\"}"}');
    expect(r.body.code).toBe('invalid_argument');
    expect(r.body.message).toMatch(/conf_json/);
    expect(await counts()).toEqual(before);
  });
});

describe('ids and strings', () => {
  it('takes an id at the length limit and refuses one past it, with a short message', async () => {
    await rejects(api.workflow.getDag({ dagId: 'd'.repeat(MAX_ID_CHARS) }), Code.NotFound, /not found/);
    await rejects(api.workflow.getDag({ dagId: 'd'.repeat(MAX_ID_CHARS + 1) }), Code.InvalidArgument, new RegExp(`^dag_id: must be at most ${MAX_ID_CHARS} characters, got ${MAX_ID_CHARS + 1}: "d+… \\(${MAX_ID_CHARS + 3} characters\\)$`));
    const huge = await failure(api.workflow.triggerRun({ dagId: 'hello', runKey: 'k'.repeat(100_000) }));
    expect(Code[huge.code]).toBe('InvalidArgument');
    expect(huge.rawMessage).toMatch(/^run_key: must be at most \d+ characters, got 100000: /);
    const task = await failure(api.workflow.clearTaskInstance({ runId: '1', taskId: 't'.repeat(100_000) }));
    expect(Code[task.code]).toBe('InvalidArgument');
    expect(task.rawMessage.length).toBeLessThan(200);
  });

  it('refuses NUL in any string before it reaches Postgres', async () => {
    const before = await counts();
    await rejects(api.workflow.getDag({ dagId: 'he\0llo' }), Code.InvalidArgument, /^dag_id: must not contain NUL characters, got "he\\u0000llo"$/);
    await rejects(api.workflow.triggerRun({ dagId: 'hello', runKey: 'a\0b' }), Code.InvalidArgument, /^run_key: must not contain NUL/);
    await rejects(api.workflow.triggerRun({ dagId: 'hel\0lo' }), Code.InvalidArgument, /^dag_id: must not contain NUL/);
    await rejects(api.workflow.clearTaskInstance({ runId: '1', taskId: 'a\0' }), Code.InvalidArgument, /^task_id: must not contain NUL/);
    await rejects(api.workflow.listRuns({ dagId: '\0' }), Code.InvalidArgument, /^dag_id: must not contain NUL/);
    await rejects(api.workflow.applyDag({ source: 'dag_id: x\0\n', filename: 'x.yaml' }), Code.InvalidArgument, /^source: must not contain NUL/);
    const tail = api.workflow.tailLogs({ runId: '1', taskId: 'a\0' });
    await rejects((async () => { for await (const _ of tail) void _; })(), Code.InvalidArgument, /^task_id: must not contain NUL/);
    await rejects(api.cluster.drainAgent({ agentId: 'a\0' }), Code.InvalidArgument, /^agent_id: must not contain NUL/);
    expect(await counts()).toEqual(before);
    expect(server.logs.filter((l) => Number(l.level) >= 50)).toEqual([]);
  });
});

describe('bodies', () => {
  it('answers garbage protobuf and JSON bodies with INVALID_ARGUMENT', async () => {
    const proto = await rawConnect('GetRun', 'application/proto', Buffer.from([0xff, 0xff, 0xff, 0xff, 0xff]));
    expect(proto.body.code).toBe('invalid_argument');
    const json = await rawConnect('GetRun', 'application/json', '{not json');
    expect(json.body.code).toBe('invalid_argument');
    const wrongType = await rawConnect('GetRun', 'application/json', '{"runId": {"x": 1}}');
    expect(wrongType.body.code).toBe('invalid_argument');
  });

  it('answers a body past the request size limit with a clear error, not a reset', async () => {
    const under = await failure(api.workflow.applyDag({ source: 'x'.repeat(MAX_REQUEST_BYTES - 1024), filename: 'big.yaml' }));
    expect(under.rawMessage).toMatch(/^source: is larger than 1048576 bytes$/);
    const over = await failure(api.workflow.applyDag({ source: 'x'.repeat(MAX_REQUEST_BYTES + 1), filename: 'big.yaml' }));
    // gRPC's code for a message past the receiver's limit; the message names the limit.
    expect(Code[over.code]).toBe('ResourceExhausted');
    expect(over.rawMessage).toMatch(new RegExp(`larger than configured readMaxBytes ${MAX_REQUEST_BYTES}`));
    expect((await api.workflow.listDags({})).dags.length).toBeGreaterThan(0);
  });
});

describe('DAG errors', () => {
  it('lists the first issues of a file with 800 invalid tasks, then how many more', async () => {
    const tasks = Array.from({ length: 800 }, (_, i) => `  - id: "bad task ${i} ${'z'.repeat(100)}"\n    command: [echo]\n`).join('');
    const err = await failure(api.workflow.applyDag({ source: `dag_id: many\ntasks:\n${tasks}`, filename: 'many.yaml' }));
    expect(Code[err.code]).toBe('InvalidArgument');
    expect(err.rawMessage).toMatch(/\n  and 780 more issues$/);
    expect(err.rawMessage.split('\n').length).toBe(2 + MAX_DAG_ISSUES_SHOWN);
  });
});
