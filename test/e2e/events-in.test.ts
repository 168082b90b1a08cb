import { Code, ConnectError } from '@connectrpc/connect';
import { beforeAll, describe, expect, it } from 'vitest';
import { RunState } from '../../src/gen/leoflow/v1/types_pb.js';
import { cli, waitFor } from '../helpers/leoflow-process.js';
import { serverForFile } from '../helpers/server-fixture.js';
import { runEndsByApi } from '../helpers/api-run-ends.js';

/**
 * Events in, on Lite with its defaults: SendEvent starts a run of each DAG whose trigger matches,
 * the payload as its conf, once per sender's key; bad input is refused naming the field and the
 * limit, and writes nothing.
 */

const f = serverForFile({ tmpPrefix: 'leoflow-events-in-' });

const DAGS = {
  raw: `dag_id: on-raw
triggers:
  - event: file.landed
    match: { bucket: raw, size.unit: [KB, MB] }
tasks:
  - id: show
    command: ["sh", "-c", "printf '%s' \\"$LEOFLOW_RUN_CONF\\""]
`,
  any: `dag_id: on-any-file
triggers: [{ event: file.landed }]
tasks:
  - id: t
    command: ["true"]
`,
  other: `dag_id: on-other
triggers: [{ event: order.paid }]
tasks:
  - id: t
    command: ["true"]
`,
};

beforeAll(async () => {
  for (const [name, source] of Object.entries(DAGS))
    await f.api.workflow.applyDag({ source, filename: `${name}.yaml` });
});

async function runCount(): Promise<number> {
  const [r] = await f.db.sql<{ n: number }[]>`select count(*)::int as n from dag_runs`;
  return r!.n;
}

async function refused(p: Promise<unknown>, message: RegExp): Promise<void> {
  const err = await p.then(
    () => null,
    (e: unknown) => ConnectError.from(e),
  );
  expect(err, 'the call was refused').not.toBeNull();
  expect(Code[err!.code]).toBe('InvalidArgument');
  expect(err!.rawMessage).toMatch(message);
}

describe('SendEvent', () => {
  it("starts a run of each DAG it triggers, the payload as the run's conf, and the run goes on", async () => {
    const payload = { bucket: 'raw', path: "it's $(touch /tmp/x).csv", size: { unit: 'MB', n: 3 } };
    const res = await f.api.workflow.sendEvent({
      name: 'file.landed',
      payloadJson: JSON.stringify(payload),
      eventKey: 'landed-1',
    });
    expect(res.duplicate).toBe(false);
    expect(res.runs.map((r) => r.dagId)).toEqual(['on-any-file', 'on-raw']);
    for (const r of res.runs) {
      expect(r.runType).toBe('event');
      expect(JSON.parse(r.confJson)).toEqual(payload);
    }
    const raw = res.runs.find((r) => r.dagId === 'on-raw')!;
    const done = await runEndsByApi(f.api, raw.runId, 'the triggered run to end');
    expect(done.state).toBe(RunState.SUCCESS);
    // Byte for byte as JSON, and nothing in it ran ($(…) stays text).
    const logs = await cli(f.server.url, ['logs', raw.runId]);
    const line = logs.stdout.split('\n').find((l) => l.startsWith('[show #1] '))!;
    expect(JSON.parse(line.slice('[show #1] '.length))).toEqual(payload);
  });

  it('takes a key once: a retry starts nothing and answers with the first runs', async () => {
    const first = await f.api.workflow.sendEvent({ name: 'order.paid', payloadJson: '{"id":7}', eventKey: 'pay-7' });
    expect(first.runs.map((r) => r.dagId)).toEqual(['on-other']);
    const before = await runCount();
    const again = await f.api.workflow.sendEvent({ name: 'order.paid', payloadJson: '{"id":7}', eventKey: 'pay-7' });
    expect(again).toMatchObject({ duplicate: true, eventId: first.eventId });
    expect(again.runs.map((r) => r.runId)).toEqual(first.runs.map((r) => r.runId));
    expect(await runCount()).toBe(before);
    // The same key under another name is another event.
    const other = await f.api.workflow.sendEvent({ name: 'file.landed', payloadJson: '{}', eventKey: 'pay-7' });
    expect(other.duplicate).toBe(false);
  });

  it('starts only the DAGs whose match holds', async () => {
    const res = await f.api.workflow.sendEvent({
      name: 'file.landed',
      payloadJson: JSON.stringify({ bucket: 'raw', size: { unit: 'GB' } }),
    });
    expect(res.runs.map((r) => r.dagId)).toEqual(['on-any-file']);
    const none = await f.api.workflow.sendEvent({ name: 'nobody.listens', payloadJson: '{}' });
    expect(none.runs).toEqual([]);
  });

  it('refuses bad input, naming the field and the limit, and writes nothing', async () => {
    const before = await runCount();
    const [events] = await f.db.sql<{ n: number }[]>`select count(*)::int as n from external_events`;
    await refused(f.api.workflow.sendEvent({}), /^name: is required$/);
    await refused(f.api.workflow.sendEvent({ name: 'has space' }), /^name: must be 1-200 characters/);
    await refused(
      f.api.workflow.sendEvent({ name: 'file.landed', payloadJson: '[1]' }),
      /^payload_json: must be a JSON object$/,
    );
    await refused(
      f.api.workflow.sendEvent({ name: 'file.landed', payloadJson: JSON.stringify({ x: 'y'.repeat(70_000) }) }),
      /^payload_json: must be at most 65536 bytes/,
    );
    await refused(f.api.workflow.sendEvent({ name: 'file.landed', eventKey: 'a b' }), /^event_key: must be 1-200/);
    expect(await runCount()).toBe(before);
    const [after] = await f.db.sql<{ n: number }[]>`select count(*)::int as n from external_events`;
    expect(after!.n).toBe(events!.n);
  });

  it('is sent from the CLI', async () => {
    const r = await cli(f.server.url, [
      ...['event', 'send', 'order.paid', '--payload', '{"id":8}', '--key', 'pay-8', '--output', 'json'],
    ]);
    expect(r.code, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout) as { duplicate: boolean; runs: { dag_id: string }[] };
    expect(out).toMatchObject({ duplicate: false, runs: [{ dag_id: 'on-other' }] });
    const again = await cli(f.server.url, ['event', 'send', 'order.paid', '--payload', '{"id":8}', '--key', 'pay-8']);
    expect(again.stdout).toMatch(
      /^event \d+ was sent before with this key: nothing started now; run \d+ of on-other\n$/,
    );
  });
});
