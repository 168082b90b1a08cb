import { Code, ConnectError } from '@connectrpc/connect';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { mapHandlerErrors } from '../../src/server/api/map-handler-errors.js';

/** What the wrapper logged, as records. */
function capture() {
  const records: { level: number; msg: string }[] = [];
  const logger = pino({ level: 'debug' }, { write: (s: string) => records.push(JSON.parse(s)) });
  return { logger, records };
}

/** A node error as a write on a stream the client reset raises it. */
const resetWrite = () =>
  Object.assign(new Error('Stream closed with error code NGHTTP2_CANCEL'), { code: 'ERR_HTTP2_STREAM_ERROR' });

describe('mapHandlerErrors', () => {
  it('logs an unexpected error of a live call at error level, as INTERNAL', async () => {
    const { logger, records } = capture();
    const impl = mapHandlerErrors(logger, {
      async *tailLogs(_req: unknown, _ctx: { signal: AbortSignal }) {
        yield 1;
        throw resetWrite();
      },
    });
    const it = impl.tailLogs({}, { signal: new AbortController().signal });
    await it.next();
    await expect(it.next()).rejects.toMatchObject({ code: Code.Internal });
    expect(records.filter((r) => r.level >= 50)).toHaveLength(1);
  });

  it('notes an error after the client cancelled the call at debug, as CANCELED, with no stack', async () => {
    const { logger, records } = capture();
    const ac = new AbortController();
    const impl = mapHandlerErrors(logger, {
      async *tailLogs(_req: unknown, _ctx: { signal: AbortSignal }) {
        yield 1;
        ac.abort(new ConnectError('the client went away', Code.Canceled));
        throw resetWrite();
      },
      async getRun(_req: unknown, ctx: { signal: AbortSignal }) {
        await Promise.resolve();
        if (ctx.signal.aborted) throw new Error('query cut short');
        return 1;
      },
    });
    const it = impl.tailLogs({}, { signal: ac.signal });
    await it.next();
    await expect(it.next()).rejects.toMatchObject({ code: Code.Canceled });
    await expect(impl.getRun({}, { signal: ac.signal })).rejects.toMatchObject({ code: Code.Canceled });
    expect(records.filter((r) => r.level >= 40)).toEqual([]);
    expect(records.filter((r) => r.level === 20)).toHaveLength(2);
    expect(JSON.stringify(records)).not.toContain('stack');
  });
});
