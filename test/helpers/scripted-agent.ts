import { createClient, type Client } from '@connectrpc/connect';
import { createGrpcTransport } from '@connectrpc/connect-node';
import { AgentService, type AttemptRef, type ConnectResponse } from '../../src/gen/leoflow/v1/agent_pb.js';

/** An async queue usable both as a request stream and as an inbox with `next()`. */
export class AsyncInbox<T> implements AsyncIterable<T> {
  readonly #items: T[] = [];
  readonly #waiters: { resolve: (v: T) => void; reject: (e: unknown) => void }[] = [];
  #closed = false;
  #error: unknown = undefined;
  #iterWaiter: (() => void) | null = null;

  push(item: T): void {
    const w = this.#waiters.shift();
    if (w) w.resolve(item);
    else this.#items.push(item);
    this.#iterWaiter?.();
  }

  close(error?: unknown): void {
    this.#closed = true;
    this.#error = error;
    for (const w of this.#waiters.splice(0)) w.reject(error ?? new Error('closed'));
    this.#iterWaiter?.();
  }

  /** The next item, waiting up to `timeoutMs`. */
  next(timeoutMs = 10_000): Promise<T> {
    if (this.#items.length > 0) return Promise.resolve(this.#items.shift()!);
    if (this.#closed) return Promise.reject(this.#error ?? new Error('closed'));
    return new Promise<T>((resolve, reject) => {
      const waiter = {
        resolve: (v: T) => (clearTimeout(t), resolve(v)),
        reject: (e: unknown) => (clearTimeout(t), reject(e)),
      };
      // A waiter that timed out leaves: the next item is for the next caller, not lost.
      const t = setTimeout(() => {
        this.#waiters.splice(this.#waiters.indexOf(waiter), 1);
        reject(new Error(`nothing received within ${timeoutMs} ms`));
      }, timeoutMs);
      this.#waiters.push(waiter);
    });
  }

  async *[Symbol.asyncIterator](): AsyncIterator<T> {
    for (;;) {
      if (this.#items.length > 0) {
        yield this.#items.shift()!;
        continue;
      }
      if (this.#closed) return;
      await new Promise<void>((r) => (this.#iterWaiter = r));
      this.#iterWaiter = null;
    }
  }
}

/** What a scripted agent sends on its stream. */
export type AgentMessage =
  Parameters<Client<typeof AgentService>['connect']>[0] extends AsyncIterable<infer T> ? T : never;

/**
 * A hand-written agent on a real server's AgentService.Connect, driven message by message the way
 * an agent in another language (or a broken one) would. The test pushes what it says in `outbox`
 * and reads what it gets from `inbox` (keepalive acks left out). With `keepaliveMs` it keeps
 * alive on its own, listing the attempts in `held`, as a real agent lists those it runs.
 */
export function scriptedAgent(baseUrl: string, opts: { keepaliveMs?: number } = {}) {
  const client = createClient(AgentService, createGrpcTransport({ baseUrl }));
  const outbox = new AsyncInbox<AgentMessage>();
  const stream = client.connect(outbox);
  const inbox = new AsyncInbox<ConnectResponse>();
  const held = new Map<string, AttemptRef>();
  let seq = 1n;
  const pump = opts.keepaliveMs
    ? setInterval(
        () => outbox.push({ msg: { case: 'keepalive', value: { seq: seq++, held: [...held.values()] } } }),
        opts.keepaliveMs,
      )
    : null;
  const done = (async () => {
    for await (const m of stream) if (m.msg.case !== 'keepaliveAck') inbox.push(m);
  })()
    .then(
      () => inbox.close(),
      (err: unknown) => inbox.close(err),
    )
    .finally(() => pump && clearInterval(pump));
  const close = () => {
    if (pump) clearInterval(pump);
    outbox.close();
  };
  return { outbox, inbox, held, done, close };
}
