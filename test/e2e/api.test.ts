import { readFile } from 'node:fs/promises';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import http2 from 'node:http2';
import { brotliCompressSync, gzipSync } from 'node:zlib';
import { Code, createClient } from '@connectrpc/connect';
import {
  compressionGzip,
  createConnectTransport,
  createGrpcTransport,
  createGrpcWebTransport,
} from '@connectrpc/connect-node';
import { beforeAll, describe, expect, it } from 'vitest';
import { WorkflowService } from '../../src/gen/leoflow/v1/workflow_pb.js';
import { ROOT } from '../helpers/leoflow-process.js';
import { serverForFile } from '../helpers/server-fixture.js';
import { rejectsWith } from '../helpers/rejects-with.js';

const execFileP = promisify(execFile);

/**
 * The API as another program sees it: bad requests get INVALID_ARGUMENT naming the field,
 * unknown ids NOT_FOUND, and nothing a client sends can crash the server or half-write a row.
 */

const f = serverForFile();

beforeAll(async () => {
  await f.api.workflow.applyDag({
    source: await readFile(`${ROOT}/examples/hello.yaml`, 'utf8'),
    filename: 'hello.yaml',
  });
});

describe('WorkflowService over gRPC: bad input', () => {
  it('names the missing field of an empty message', async () => {
    await rejectsWith(f.api.workflow.applyDag({}), Code.InvalidArgument, /^source: is required/);
    await rejectsWith(f.api.workflow.getDag({}), Code.InvalidArgument, /^dag_id: is required$/);
    await rejectsWith(f.api.workflow.pauseDag({}), Code.InvalidArgument, /^dag_id: is required$/);
    await rejectsWith(f.api.workflow.triggerRun({}), Code.InvalidArgument, /^dag_id: is required$/);
    await rejectsWith(f.api.workflow.getRun({}), Code.InvalidArgument, /^run_id: is required$/);
    await rejectsWith(f.api.workflow.cancelRun({}), Code.InvalidArgument, /^run_id: is required$/);
    await rejectsWith(f.api.workflow.listTaskInstances({}), Code.InvalidArgument, /^run_id: is required$/);
    const stream = f.api.workflow.tailLogs({});
    await rejectsWith(
      (async () => {
        for await (const _ of stream) void _;
      })(),
      Code.InvalidArgument,
      /^run_id: is required$/,
    );
  });

  it('rejects malformed values with the reason', async () => {
    await rejectsWith(
      f.api.workflow.getRun({ runId: '-5' }),
      Code.InvalidArgument,
      /^run_id: must be a positive integer id, got "-5"$/,
    );
    await rejectsWith(
      f.api.workflow.triggerRun({ dagId: 'hello', confJson: '{oops' }),
      Code.InvalidArgument,
      /^conf_json: is not valid JSON/,
    );
    await rejectsWith(
      f.api.workflow.triggerRun({ dagId: 'hello', runKey: 'has space' }),
      Code.InvalidArgument,
      /^run_key: must be 1-200 characters/,
    );
    await rejectsWith(
      f.api.workflow.listRuns({ limit: 5000 }),
      Code.InvalidArgument,
      /^limit: must be between 0 and 1000, got 5000$/,
    );
    await rejectsWith(
      f.api.workflow.applyDag({ source: 'dag_id: x\ntasks: []\n', filename: 'x.yaml' }),
      Code.InvalidArgument,
      /x\.yaml: tasks: /,
    );
    await rejectsWith(
      f.api.workflow.applyDag({ source: 'x'.repeat(1024 * 1024 + 1), filename: 'big.yaml' }),
      Code.InvalidArgument,
      /^source: is larger than 1048576 bytes$/,
    );
  });

  it('answers NOT_FOUND for unknown ids', async () => {
    await rejectsWith(f.api.workflow.getDag({ dagId: 'nope' }), Code.NotFound, /^DAG "nope" not found$/);
    await rejectsWith(f.api.workflow.triggerRun({ dagId: 'nope' }), Code.NotFound, /^DAG "nope" not found$/);
    await rejectsWith(f.api.workflow.getRun({ runId: '424242' }), Code.NotFound, /^run 424242 not found$/);
    await rejectsWith(f.api.workflow.listRuns({ dagId: 'nope' }), Code.NotFound, /^DAG "nope" not found$/);
    await rejectsWith(f.api.workflow.cancelRun({ runId: '424242' }), Code.NotFound, /^run 424242 not found$/);
  });

  it('writes nothing for a rejected request', async () => {
    const before = await f.db
      .sql`select (select count(*) from dags) as d, (select count(*) from dag_runs) as r, (select count(*) from task_instances) as t`;
    await rejectsWith(
      f.api.workflow.applyDag({
        source: 'dag_id: half\ntasks:\n  - id: a\n    command: [echo]\n  - id: a\n    command: [echo]\n',
        filename: 'half.yaml',
      }),
      Code.InvalidArgument,
      /duplicate task id "a"/,
    );
    await rejectsWith(
      f.api.workflow.triggerRun({ dagId: 'hello', confJson: '[]' }),
      Code.InvalidArgument,
      /^conf_json: must be a JSON object$/,
    );
    const after = await f.db
      .sql`select (select count(*) from dags) as d, (select count(*) from dag_runs) as r, (select count(*) from task_instances) as t`;
    expect(after).toEqual(before);
  });

  it('survives a garbage protobuf body and keeps serving', async () => {
    const session = http2.connect(f.server.url);
    const status = await new Promise<string | undefined>((resolve, reject) => {
      const req = session.request({
        ':method': 'POST',
        ':path': '/leoflow.v1.WorkflowService/GetRun',
        'content-type': 'application/grpc',
        te: 'trailers',
      });
      let grpcStatus: string | undefined;
      req.on('response', (h) => (grpcStatus ??= h['grpc-status'] as string | undefined));
      req.on('trailers', (t) => (grpcStatus = t['grpc-status'] as string));
      req.on('end', () => resolve(grpcStatus));
      req.on('error', reject);
      req.resume();
      // A gRPC frame header announcing 5 bytes, followed by bytes that are not a protobuf message.
      req.end(Buffer.from([0, 0, 0, 0, 5, 0xff, 0xff, 0xff, 0xff, 0xff]));
    });
    session.close();
    expect(status).toBeDefined();
    expect(status).not.toBe('0');
    expect((await f.api.workflow.listDags({})).dags.map((d) => d.dagId)).toEqual(['hello']);
  });
});

/** One HTTP/2 request to the server: its status, gRPC status (headers or trailers) and body. */
function h2request(
  headers: Record<string, string>,
  body: Buffer,
): Promise<{ status: number; grpcStatus: string | undefined; grpcMessage: string; body: string }> {
  const session = http2.connect(f.server.url);
  return new Promise<{ status: number; grpcStatus: string | undefined; grpcMessage: string; body: string }>(
    (resolve, reject) => {
      const req = session.request({ ':method': 'POST', te: 'trailers', ...headers });
      let status = 0;
      let grpcStatus: string | undefined;
      let grpcMessage = '';
      const chunks: Buffer[] = [];
      req.on('response', (h) => {
        status = Number(h[':status']);
        grpcStatus ??= h['grpc-status'] as string | undefined;
        grpcMessage ||= decodeURIComponent(String(h['grpc-message'] ?? ''));
      });
      req.on('trailers', (t) => {
        grpcStatus = t['grpc-status'] as string;
        grpcMessage = decodeURIComponent(String(t['grpc-message'] ?? ''));
      });
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => resolve({ status, grpcStatus, grpcMessage, body: Buffer.concat(chunks).toString('latin1') }));
      req.on('error', reject);
      req.end(body);
    },
  ).finally(() => session.close());
}

/** A gRPC / gRPC-Web envelope: flags, length, message. */
function envelope(flags: number, message: Buffer): Buffer {
  const head = Buffer.alloc(5);
  head[0] = flags;
  head.writeUInt32BE(message.length, 1);
  return Buffer.concat([head, message]);
}

describe('compressed garbage bodies', () => {
  const garbage = Buffer.from([0xff, 0xff, 0xff, 0xff, 0xff]);
  const path = '/leoflow.v1.WorkflowService/GetRun';

  it('a gzip-compressed body that is not a protobuf message is INVALID_ARGUMENT, never INTERNAL (gRPC, gRPC-Web, Connect)', async () => {
    const grpc = await h2request(
      { ':path': path, 'content-type': 'application/grpc', 'grpc-encoding': 'gzip' },
      envelope(1, gzipSync(garbage)),
    );
    expect([grpc.grpcStatus, grpc.grpcMessage]).toEqual([
      '3',
      expect.stringMatching(/^request: is not a valid leoflow\.v1\.GetRunRequest protobuf message/),
    ]);
    const web = await h2request(
      { ':path': path, 'content-type': 'application/grpc-web+proto', 'grpc-encoding': 'gzip' },
      envelope(1, gzipSync(garbage)),
    );
    expect(web.body).toMatch(/grpc-status:\s*3\r\n/);
    const unary = await h2request(
      {
        ':path': path,
        'content-type': 'application/proto',
        'content-encoding': 'gzip',
        'connect-protocol-version': '1',
      },
      gzipSync(garbage),
    );
    expect(unary.status).toBe(400);
    expect(JSON.parse(unary.body)).toMatchObject({
      code: 'invalid_argument',
      message: expect.stringMatching(/^request: is not a valid leoflow\.v1\.GetRunRequest protobuf message/),
    });
    const br = await h2request(
      { ':path': path, 'content-type': 'application/proto', 'content-encoding': 'br', 'connect-protocol-version': '1' },
      brotliCompressSync(garbage),
    );
    expect([br.status, JSON.parse(br.body).code]).toEqual([400, 'invalid_argument']);
    // Bytes that are not gzip at all are refused as well, whatever says so.
    const notGzip = await h2request(
      { ':path': path, 'content-type': 'application/grpc', 'grpc-encoding': 'gzip' },
      envelope(1, garbage),
    );
    expect([notGzip.grpcStatus, notGzip.grpcMessage]).toEqual([
      '3',
      expect.stringMatching(/^request: does not decompress as gzip \(/),
    ]);
    const notGzipUnary = await h2request(
      {
        ':path': path,
        'content-type': 'application/proto',
        'content-encoding': 'gzip',
        'connect-protocol-version': '1',
      },
      garbage,
    );
    expect(notGzipUnary.status).toBe(400);
    expect(JSON.parse(notGzipUnary.body)).toMatchObject({ code: 'invalid_argument' });
  });

  it('a garbage frame on the agent stream ends it with INVALID_ARGUMENT, never INTERNAL (issue 38)', async () => {
    const connect = '/leoflow.v1.AgentService/Connect';
    for (const bytes of [garbage, Buffer.from([0x0a, 0x05, 0x01]), Buffer.from('not a protobuf message at all')]) {
      const r = await h2request({ ':path': connect, 'content-type': 'application/grpc' }, envelope(0, bytes));
      expect([r.grpcStatus, r.grpcMessage]).toEqual([
        '3',
        expect.stringMatching(
          /^a message on the stream is not a valid leoflow\.v1\.ConnectRequest protobuf message \(/,
        ),
      ]);
    }
  });

  it('still answers a well-formed gzip-compressed request', async () => {
    for (const transport of [
      createGrpcTransport({ baseUrl: f.server.url, sendCompression: compressionGzip }),
      createConnectTransport({
        baseUrl: f.server.url,
        httpVersion: '2',
        sendCompression: compressionGzip,
        compressMinBytes: 0,
      }),
      createGrpcWebTransport({
        baseUrl: f.server.url,
        httpVersion: '2',
        sendCompression: compressionGzip,
        compressMinBytes: 0,
      }),
    ]) {
      const client = createClient(WorkflowService, transport);
      expect((await client.getDag({ dagId: 'hello' })).dag?.dagId).toBe('hello');
      await rejectsWith(client.getDag({ dagId: 'nope' }), Code.NotFound, /not found/);
    }
  });
});

describe('one port, three protocols', () => {
  it('serves the same API over gRPC, and over gRPC-Web and Connect on HTTP/2 and on HTTP/1.1, without TLS', async () => {
    // Seen failing before the plain port looked at the first bytes: it spoke HTTP/2 only, and
    // every HTTP/1.1 call (a browser's, curl's) got "Received HTTP/0.9".
    const clients = [f.api.workflow];
    for (const httpVersion of ['2', '1.1'] as const) {
      clients.push(createClient(WorkflowService, createConnectTransport({ baseUrl: f.server.url, httpVersion })));
      clients.push(createClient(WorkflowService, createGrpcWebTransport({ baseUrl: f.server.url, httpVersion })));
    }
    for (const client of clients) {
      expect((await client.listDags({})).dags.map((d) => d.dagId)).toEqual(['hello']);
      await rejectsWith(client.getDag({ dagId: 'nope' }), Code.NotFound, /not found/);
    }
  });

  it('answers curl: Connect JSON over HTTP/1.1, keep-alive and all', async () => {
    const r = await execFileP('curl', [
      '-sS',
      '-i',
      '-X',
      'POST',
      '-H',
      'content-type: application/json',
      '-d',
      '{}',
      `${f.server.url}/leoflow.v1.WorkflowService/ListDags`,
      `${f.server.url}/leoflow.v1.WorkflowService/ListDags`,
    ]);
    const answers = r.stdout.split(/(?=HTTP\/1\.1 )/);
    expect(answers).toHaveLength(2);
    for (const a of answers) {
      expect(a).toMatch(/^HTTP\/1\.1 200 OK/);
      expect(JSON.parse(a.slice(a.indexOf('\r\n\r\n') + 4))).toMatchObject({ dags: [{ dagId: 'hello' }] });
    }
    expect(r.stderr).not.toContain('HTTP/0.9');
  });
});

describe('idempotent trigger and log streaming', () => {
  it('returns the same run for the same run_key, and streams its logs until it ends', async () => {
    const first = await f.api.workflow.triggerRun({ dagId: 'hello', runKey: 'nightly-2026-11-21' });
    const again = await f.api.workflow.triggerRun({ dagId: 'hello', runKey: 'nightly-2026-11-21' });
    expect(first.created).toBe(true);
    expect(again.created).toBe(false);
    expect(again.run!.runId).toBe(first.run!.runId);
    const lines: string[] = [];
    for await (const chunk of f.api.workflow.tailLogs({ runId: first.run!.runId, follow: true })) {
      for (const l of chunk.lines) lines.push(`${l.taskId}#${l.tryNumber} ${l.stream}: ${l.line}`);
    }
    // follow ends by itself once the run has ended, with every line delivered.
    expect(lines.filter((l) => l.startsWith('greet#1 stdout:'))).toHaveLength(1);
    expect(lines).toContain('goodbye#1 system: exited with code 0');
    const run = await f.api.workflow.getRun({ runId: first.run!.runId });
    expect(run.taskInstances.map((t) => t.tryNumber)).toEqual([1, 1]);
    await rejectsWith(
      f.api.workflow.tailLogs({ runId: first.run!.runId, taskId: 'nope' })[Symbol.asyncIterator]().next(),
      Code.NotFound,
      /has no task "nope"/,
    );
  });
});
