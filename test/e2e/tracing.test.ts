import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { createClient } from '@connectrpc/connect';
import { createConnectTransport } from '@connectrpc/connect-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import { RunState } from '../../src/gen/leoflow/v1/types_pb.js';
import { WorkflowService } from '../../src/gen/leoflow/v1/workflow_pb.js';
import { startFakeKubeApi, type FakeKubeApi } from '../helpers/fake-kube/index.js';
import { freePort } from '../helpers/global-setup.js';
import { startServer, waitFor, type AgentProcess, type ServerProcess } from '../helpers/leoflow-process.js';
import { startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from '../helpers/otlp-receiver.js';
import { connectedAgent, serverForFile } from '../helpers/server-fixture.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';
import { proServerArgs } from '../helpers/fake-kube/pro-server-args.js';
import { applyDag } from '../helpers/applied-dag.js';

/**
 * Tracing end to end: a run triggered with a caller's traceparent is one trace at a real OTLP/HTTP
 * receiver (decoded with the OpenTelemetry protos): the run's span a child of the caller's, each
 * attempt's a child of the run's, dispatch a child of its attempt; and the task's process, run by
 * the subprocess executor and by an agent, sees its attempt's span in TRACEPARENT.
 */

let otlp: OtlpReceiver;
let agent: AgentProcess;

const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736';
const CALLER_SPAN = '00f067aa0ba902b7';

beforeAll(async () => {
  otlp = await startOtlpReceiver();
});
afterAll(async () => {
  await otlp?.close();
});
const f = serverForFile({
  tmpPrefix: 'leoflow-tracing-',
  args: () => ['--otlp-endpoint', otlp.url, '--heartbeat-interval', '300ms', '--tick-interval', '200ms'],
});

beforeAll(async () => {
  agent = await connectedAgent(f, 'trace-agent');
  await applyDag(
    f.server.url,
    f.tmp,
    `dag_id: traced
tasks:
  - id: local
    command: ["sh", "-c", "printf '%s|%s' \\"$TRACEPARENT\\" \\"$TRACESTATE\\" > ${f.tmp}/local.out"]
  - id: remote
    executor: agents
    depends_on: [local]
    command: ["sh", "-c", "printf '%s|%s' \\"$TRACEPARENT\\" \\"$TRACESTATE\\" > ${f.tmp}/remote.out"]
`,
  );
}, 60_000);

afterAll(async () => {
  await agent?.stop(5000);
});

async function runToEnd(headers: Record<string, string>): Promise<{ runId: string; traceparent: string }> {
  const { run } = await f.api.workflow.triggerRun({ dagId: 'traced' }, { headers });
  await waitFor(
    'run succeeded',
    async () => (await f.api.workflow.getRun({ runId: run!.runId })).run!.state === RunState.SUCCESS,
    30_000,
  );
  return { runId: run!.runId, traceparent: run!.traceparent };
}

function spansOfRun(runId: string): ReceivedSpan[] {
  return otlp.spans.filter((s) => s.attributes['leoflow.run_id'] === runId);
}

describe('tracing', () => {
  it('exports one trace from the caller through the run, its attempts and their dispatch, and the tasks see their attempt in TRACEPARENT', async () => {
    const { runId, traceparent } = await runToEnd({
      traceparent: `00-${TRACE_ID}-${CALLER_SPAN}-01`,
      tracestate: 'vendor=abc',
    });
    // The run continues the caller's trace with a span of its own.
    expect(traceparent).toMatch(new RegExp(`^00-${TRACE_ID}-[0-9a-f]{16}-01$`));
    const runSpanId = traceparent.split('-')[2]!;

    // Run + 2 attempts + 2 dispatches, exported within the batch delay.
    await waitFor('spans exported', async () => spansOfRun(runId).length >= 5, 15_000);
    const spans = spansOfRun(runId);
    expect(otlp.rejected).toEqual([]);
    for (const s of spans) expect(s.traceId).toBe(TRACE_ID);
    expect(spans.every((s) => s.resource['service.name'] === 'leoflow')).toBe(true);

    const run = spans.filter((s) => s.name === 'run traced');
    expect(run).toHaveLength(1);
    expect(run[0]!.spanId).toBe(runSpanId);
    expect(run[0]!.parentSpanId).toBe(CALLER_SPAN);
    expect(run[0]!.traceState).toBe('vendor=abc');
    expect(run[0]!.attributes).toMatchObject({ 'leoflow.dag_id': 'traced', 'leoflow.state': 'success' });

    const attempts = spans.filter((s) => s.name.startsWith('attempt '));
    expect(attempts.map((s) => s.name).sort()).toEqual(['attempt local', 'attempt remote']);
    for (const a of attempts) {
      expect(a.parentSpanId).toBe(runSpanId);
      expect(a.attributes).toMatchObject({
        'leoflow.dag_id': 'traced',
        'leoflow.run_id': runId,
        'leoflow.try_number': 1,
        'leoflow.state': 'success',
      });
      expect(a.events.map((e) => e.name)).toEqual(['started']);
      // Inside the run's span in time.
      expect(a.startNs).toBeGreaterThanOrEqual(run[0]!.startNs);
      expect(a.endNs).toBeLessThanOrEqual(run[0]!.endNs);
    }
    const byTask = new Map(attempts.map((a) => [a.attributes['leoflow.task_id'], a]));
    expect(byTask.get('remote')!.attributes['leoflow.agent_id']).toBe('trace-agent');

    // Dispatch: a child of its attempt.
    const dispatches = spans.filter((s) => s.name === 'dispatch');
    expect(dispatches.map((d) => d.attributes['leoflow.task_id']).sort()).toEqual(['local', 'remote']);
    for (const d of dispatches)
      expect(d.parentSpanId).toBe(byTask.get(d.attributes['leoflow.task_id'] as string)!.spanId);

    // The processes, one run by the server and one by the agent, are in the attempt's span.
    for (const task of ['local', 'remote']) {
      const [seen, state] = (await readFile(path.join(f.tmp, `${task}.out`), 'utf8')).split('|');
      expect(seen, task).toBe(`00-${TRACE_ID}-${byTask.get(task)!.spanId}-01`);
      expect(state, task).toBe('vendor=abc');
    }
  }, 60_000);

  it('starts a trace of its own for a run triggered without one, or with one that does not parse', async () => {
    for (const headers of [
      {} as Record<string, string>,
      { traceparent: '00-00000000000000000000000000000000-00f067aa0ba902b7-01' },
      { traceparent: 'not a traceparent' },
    ]) {
      const { runId, traceparent } = await runToEnd(headers);
      const [, traceId, spanId] = traceparent.split('-');
      expect(traceId).toMatch(/^[0-9a-f]{32}$/);
      expect(traceId).not.toBe('00000000000000000000000000000000');
      await waitFor('run span exported', async () => spansOfRun(runId).some((s) => s.name === 'run traced'), 15_000);
      const run = spansOfRun(runId).find((s) => s.name === 'run traced')!;
      expect(run.traceId).toBe(traceId);
      expect(run.spanId).toBe(spanId);
      expect(run.parentSpanId).toBe('');
    }
  }, 90_000);

  it('takes the traceparent from an HTTP header too (the Connect protocol, JSON)', async () => {
    const caller = 'a1b2c3d4e5f60718';
    // Connect's unary calls are plain HTTP POSTs: the traceparent is an ordinary request header.
    const connect = createClient(
      WorkflowService,
      createConnectTransport({ baseUrl: f.server.url, httpVersion: '2', useBinaryFormat: false }),
    );
    const { run } = await connect.triggerRun(
      { dagId: 'traced' },
      { headers: { traceparent: `00-${TRACE_ID}-${caller}-01` } },
    );
    expect(run!.traceparent).toMatch(new RegExp(`^00-${TRACE_ID}-[0-9a-f]{16}-01$`));
    await waitFor('run span exported', async () => spansOfRun(run!.runId).some((s) => s.name === 'run traced'), 30_000);
    expect(spansOfRun(run!.runId).find((s) => s.name === 'run traced')!.parentSpanId).toBe(caller);
  }, 60_000);

  it('records a failed attempt as an error span, and its retry as a span of its own', async () => {
    await applyDag(
      f.server.url,
      f.tmp,
      `dag_id: flaky
tasks:
  - id: once
    retries: 1
    retry_delay: 100ms
    command: ["sh", "-c", "test \\"$LEOFLOW_TRY_NUMBER\\" = 2 || { echo boom >&2; exit 3; }"]
`,
    );
    const { run } = await f.api.workflow.triggerRun({ dagId: 'flaky' });
    await waitFor(
      'run succeeded',
      async () => (await f.api.workflow.getRun({ runId: run!.runId })).run!.state === RunState.SUCCESS,
      30_000,
    );
    await waitFor(
      'spans exported',
      async () => spansOfRun(run!.runId).filter((s) => s.name === 'attempt once').length === 2,
      15_000,
    );
    const [first, second] = spansOfRun(run!.runId)
      .filter((s) => s.name === 'attempt once')
      .sort((a, b) => Number(a.attributes['leoflow.try_number']) - Number(b.attributes['leoflow.try_number']));
    expect(first!.attributes).toMatchObject({
      'leoflow.try_number': 1,
      'leoflow.state': 'up_for_retry',
      'leoflow.exit_code': 3,
    });
    expect(first!.status.code).toBe(2); // STATUS_CODE_ERROR
    expect(second!.attributes).toMatchObject({ 'leoflow.try_number': 2, 'leoflow.state': 'success' });
    expect(second!.status.code).toBe(0);
    expect(first!.spanId).not.toBe(second!.spanId);
  }, 60_000);
});

describe('tracing in Pro', () => {
  const NS = 'leoflow';
  let proDb: TestDatabase;
  let kube: FakeKubeApi;
  let pro: ServerProcess;

  beforeAll(async () => {
    proDb = await createTestDatabase();
    kube = await startFakeKubeApi({ namespaces: [NS] });
    const port = await freePort();
    pro = await startServer({
      env: { DATABASE_URL: proDb.url },
      args: [...proServerArgs({ port, kube, namespace: NS }), '--otlp-endpoint', otlp.url],
    });
  }, 60_000);

  afterAll(async () => {
    await pro?.stop();
    await kube?.close();
    await proDb?.drop();
  });

  it("traces the pod's creation as a child of its attempt, and the task in the pod sees its attempt in TRACEPARENT", async () => {
    await applyDag(
      pro.url,
      f.tmp,
      'dag_id: podded\ntasks:\n  - id: p\n    command: ["sh", "-c", "echo \\"tp=$TRACEPARENT\\""]\n',
    );
    const proApi = createClients(pro.url);
    const { run } = await proApi.workflow.triggerRun(
      { dagId: 'podded' },
      { headers: { traceparent: `00-${TRACE_ID}-${CALLER_SPAN}-01` } },
    );
    await waitFor(
      'run succeeded',
      async () => (await proApi.workflow.getRun({ runId: run!.runId })).run!.state === RunState.SUCCESS,
      30_000,
    );
    const ofRun = () =>
      otlp.spans.filter(
        (s) => s.attributes['leoflow.run_id'] === run!.runId && s.resource['leoflow.edition'] === 'pro',
      );
    await waitFor(
      'spans exported',
      async () => ['run podded', 'attempt p', 'dispatch', 'create pod'].every((n) => ofRun().some((s) => s.name === n)),
      15_000,
    );
    const attempt = ofRun().find((s) => s.name === 'attempt p')!;
    const create = ofRun().find((s) => s.name === 'create pod')!;
    expect(create.traceId).toBe(TRACE_ID);
    expect(create.parentSpanId).toBe(attempt.spanId);
    expect(create.attributes).toMatchObject({ 'k8s.namespace.name': NS, 'leoflow.outcome': 'created' });
    expect(String(create.attributes['k8s.pod.name'])).toMatch(/^lf-podded-p-/);
    const [line] = await proDb.sql<{ line: string }[]>`select line from task_logs where line like 'tp=%'`;
    expect(line?.line).toBe(`tp=00-${TRACE_ID}-${attempt.spanId}-01`);
  }, 60_000);
});
