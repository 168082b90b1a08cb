import { Code, ConnectError } from '@connectrpc/connect';
import { describe, expect, it } from 'vitest';
import { WRITES_WAITING_PER_CALLER, WriteShare } from '../../src/server/auth/write-share.js';

describe("a caller's share of the writes", () => {
  it('runs at most its share at once, lets the next in line in as each ends, and refuses past the queue', async () => {
    const share = new WriteShare(2);
    const order: string[] = [];
    const first = await share.enter('a', () => 'a');
    const second = await share.enter('a', () => 'a');
    // Another caller is not held behind this one.
    (await share.enter('b', () => 'b'))();
    const waiting = Array.from({ length: WRITES_WAITING_PER_CALLER }, (_, i) =>
      share
        .enter('a', () => 'a')
        .then((leave) => {
          order.push(`w${i}`);
          return leave;
        }),
    );
    await new Promise((r) => setImmediate(r));
    expect(order).toEqual([]);
    const refused = await share
      .enter('a', () => 'TriggerRun: API token "a"')
      .then(
        () => null,
        (e: unknown) => e as ConnectError,
      );
    expect(refused?.code).toBe(Code.ResourceExhausted);
    expect(refused?.rawMessage).toBe(
      `TriggerRun: API token "a" has 2 writes running and ${WRITES_WAITING_PER_CALLER} waiting, the limit ` +
        `(--max-token-concurrent-writes 2, and ${WRITES_WAITING_PER_CALLER} waiting): wait for answers before sending more`,
    );
    first();
    first(); // a second call gives nothing back twice
    await new Promise((r) => setImmediate(r));
    expect(order).toEqual(['w0']);
    second();
    await new Promise((r) => setImmediate(r));
    expect(order).toEqual(['w0', 'w1']);
    for (const leave of await Promise.all(waiting.slice(0, 2))) leave();
    await new Promise((r) => setImmediate(r));
    expect(order.slice(0, 4)).toEqual(['w0', 'w1', 'w2', 'w3']);
  });
});
