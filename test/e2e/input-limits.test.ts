import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { Code, ConnectError } from '@connectrpc/connect';
import { beforeAll, describe, expect, it } from 'vitest';
import { LIMITS } from '../../src/core/limits.js';
import { cli } from '../helpers/leoflow-process.js';
import { serverForFile } from '../helpers/server-fixture.js';

/**
 * Hostile input to the API, each limit at its bound and one past it: refused before any work with
 * INVALID_ARGUMENT (RESOURCE_EXHAUSTED for a message too large) naming the field and the limit,
 * with an error short enough to travel, and nothing written.
 */

async function refusal(p: Promise<unknown>): Promise<ConnectError> {
  try {
    await p;
  } catch (err) {
    return ConnectError.from(err);
  }
  throw new Error('the request was accepted');
}

const runCount = async () => Number((await f.db.sql<{ n: string }[]>`select count(*) as n from dag_runs`)[0]!.n);

/** A JSON object of exactly `bytes` bytes. */
function confOf(bytes: number): string {
  const head = '{"pad":"';
  return head + 'x'.repeat(bytes - head.length - 2) + '"}';
}

const f = serverForFile({ tmpPrefix: 'leoflow-limits-', args: ['--dags', 'examples'] });

beforeAll(async () => {
  // Paused: the runs made here are only rows.
  await f.api.workflow.pauseDag({ dagId: 'hello', paused: true });
}, 60_000);

describe('input limits', () => {
  it(`takes a conf of ${LIMITS.confBytes} bytes and refuses one byte more, writing nothing`, async () => {
    expect((await f.api.workflow.triggerRun({ dagId: 'hello', confJson: confOf(LIMITS.confBytes) })).created).toBe(
      true,
    );
    const before = await runCount();
    const e = await refusal(f.api.workflow.triggerRun({ dagId: 'hello', confJson: confOf(LIMITS.confBytes + 1) }));
    expect(e.code).toBe(Code.InvalidArgument);
    expect(e.rawMessage).toBe(
      `conf_json: must be at most ${LIMITS.confBytes} bytes (it is exported to every task's environment), got ${LIMITS.confBytes + 1}`,
    );
    expect(await runCount()).toBe(before);
  });

  it(`takes a conf nested ${LIMITS.confDepth} deep and refuses one level more, or 100,000`, async () => {
    const nested = (n: number) => '{"a":'.repeat(n - 1) + '{}' + '}'.repeat(n - 1);
    expect((await f.api.workflow.triggerRun({ dagId: 'hello', confJson: nested(LIMITS.confDepth) })).created).toBe(
      true,
    );
    for (const n of [LIMITS.confDepth + 1, 100_000]) {
      const e = await refusal(
        f.api.workflow.triggerRun({ dagId: 'hello', confJson: nested(n).slice(0, LIMITS.confBytes) }),
      );
      expect(e.code).toBe(Code.InvalidArgument);
      expect(e.rawMessage).toMatch(
        new RegExp(`^conf_json: must nest at most ${LIMITS.confDepth} levels deep, got \\d+$`),
      );
    }
  });

  it('refuses a conf whose strings Postgres cannot store (an escaped NUL, a lone surrogate), naming where', async () => {
    const before = await runCount();
    const nul = await refusal(
      f.api.workflow.triggerRun({ dagId: 'hello', confJson: '{"db":{"password":"a\\u0000b"}}' }),
    );
    expect([nul.code, nul.rawMessage]).toEqual([
      Code.InvalidArgument,
      'conf_json: $.db.password: must not contain NUL characters',
    ]);
    const lone = await refusal(f.api.workflow.triggerRun({ dagId: 'hello', confJson: '{"a":"\\ud800"}' }));
    expect([lone.code, lone.rawMessage]).toEqual([
      Code.InvalidArgument,
      'conf_json: $.a: must be valid Unicode (it has a lone surrogate)',
    ]);
    expect(await runCount()).toBe(before);
  });

  it(`takes ids of ${LIMITS.idChars} characters and refuses longer ones with a short error, even of 100 KB`, async () => {
    const atLimit = await refusal(f.api.workflow.getDag({ dagId: 'd'.repeat(LIMITS.idChars) }));
    expect(atLimit.code).toBe(Code.NotFound);
    for (const n of [LIMITS.idChars + 1, 100_000]) {
      const e = await refusal(f.api.workflow.getDag({ dagId: 'd'.repeat(n) }));
      expect(e.code).toBe(Code.InvalidArgument);
      expect(e.rawMessage).toMatch(
        new RegExp(`^dag_id: must be at most ${LIMITS.idChars} characters, got ${n}: "d+…" \\(${n} characters\\)$`),
      );
      expect(e.rawMessage.length).toBeLessThan(300);
    }
  });

  it('refuses a NUL in any id before it reaches Postgres: INVALID_ARGUMENT, never INTERNAL or NOT_FOUND', async () => {
    const calls: [string, Promise<unknown>][] = [
      ['dag_id', f.api.workflow.getDag({ dagId: 'a\0b' })],
      ['dag_id', f.api.workflow.triggerRun({ dagId: 'a\0b' })],
      ['dag_id', f.api.workflow.pauseDag({ dagId: 'a\0b', paused: true })],
      ['dag_id', f.api.workflow.listRuns({ dagId: 'a\0b' })],
      ['task_id', f.api.workflow.clearTaskInstance({ runId: '1', taskId: 'a\0b' })],
      ['task_id', f.api.workflow.cancelTaskInstance({ runId: '1', taskId: 'a\0b' })],
      ['dag_id', f.api.workflow.deleteDag({ dagId: 'a\0b' })],
    ];
    for (const [field, call] of calls) {
      const e = await refusal(call);
      expect([e.code, e.rawMessage]).toEqual([
        Code.InvalidArgument,
        `${field}: must not contain NUL characters, got "a\\u0000b"`,
      ]);
    }
    const tail = await refusal(
      (async () => {
        for await (const _ of f.api.workflow.tailLogs({ runId: '1', taskId: 'a\0b' }));
      })(),
    );
    expect(tail.code).toBe(Code.InvalidArgument);
    expect(await f.db.sql`select 1 from dags where dag_id like ${'a%b'}`).toHaveLength(0);
  });

  it(`refuses a request larger than ${LIMITS.requestBytes} bytes before parsing it`, async () => {
    const e = await refusal(f.api.workflow.applyDag({ source: 'x'.repeat(LIMITS.requestBytes + 1) }));
    expect(e.code).toBe(Code.ResourceExhausted);
    expect(e.rawMessage).toMatch(new RegExp(`${LIMITS.requestBytes}`));
  });

  it(`lists the first ${LIMITS.dagErrors} errors of a DAG file with 800 bad tasks, then how many more, and the CLI prints them`, async () => {
    const file = path.join(f.tmp, 'bad.yaml');
    await writeFile(
      file,
      [
        'dag_id: bad',
        'tasks:',
        ...Array.from({ length: 800 }, (_, i) => `  - { id: t${i}, command: ["true"], retries: -1 }`),
        '',
      ].join('\n'),
    );
    const r = await cli(f.server.url, ['dag', 'apply', file]);
    expect(r.code).not.toBe(0);
    expect(r.stderr).not.toMatch(/NGHTTP2|RST_STREAM/);
    expect(r.stderr).toMatch(/tasks\[0\]\.retries/);
    expect(r.stderr).toMatch(/… and 750 more/);
    expect(r.stderr.split('\n').filter((l) => /\.retries: /.test(l))).toHaveLength(LIMITS.dagErrors);
  });
});
