/**
 * A scripted AgentService peer, served with connect-node on 127.0.0.1 (h2c), for testing the
 * agent runtime at the process boundary. It behaves like the control plane for what the agent
 * uses: refuses a protocol version it does not speak with FAILED_PRECONDITION, answers Hello
 * with Welcome (resumed/superseded per its script), acks every Keepalive and Finished, stores
 * log lines once per seq, and lets a test push Assign/Cancel/Drain or end a stream.
 */
import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import { create } from '@bufbuild/protobuf';
import { durationFromMs } from '@bufbuild/protobuf/wkt';
import { Code, ConnectError } from '@connectrpc/connect';
import { connectNodeAdapter } from '@connectrpc/connect-node';
import {
  AgentService,
  ConnectResponseSchema,
  ProtocolVersion,
  type AssignSchema,
  type AttemptRef,
  type ConnectRequest,
  type ConnectResponse,
  type Finished,
  type Hello,
  type LogEntry,
} from '../../src/gen/leoflow/v1/agent_pb.js';
import type { MessageInitShape } from '@bufbuild/protobuf';

export type AssignInit = MessageInitShape<typeof AssignSchema>;
type ResponseInit = MessageInitShape<typeof ConnectResponseSchema>;

/** An async queue the handler yields from; ends or fails on demand. */
class Outgoing implements AsyncIterable<ConnectResponse> {
  #items: ConnectResponse[] = [];
  #end: { error?: ConnectError } | null = null;
  #wake: (() => void) | null = null;
  push(m: ConnectResponse): void {
    if (this.#end) return;
    this.#items.push(m);
    this.#wake?.();
  }
  finish(error?: ConnectError): void {
    this.#end ??= error ? { error } : {};
    this.#wake?.();
  }
  async *[Symbol.asyncIterator](): AsyncIterator<ConnectResponse> {
    for (;;) {
      const item = this.#items.shift();
      if (item) {
        yield item;
        continue;
      }
      if (this.#end) {
        if (this.#end.error) throw this.#end.error;
        return;
      }
      await new Promise<void>((r) => (this.#wake = r));
      this.#wake = null;
    }
  }
}

export class FakeStream {
  readonly received: ConnectRequest[] = [];
  /** The agent's side ended (half-closed or cancelled). */
  peerEnded = false;
  /** Stop answering Keepalive (a deaf stream). */
  deaf = false;
  readonly #out = new Outgoing();
  constructor(
    readonly id: number,
    readonly hello: Hello,
  ) {}
  send(msg: ResponseInit['msg']): void {
    this.#out.push(create(ConnectResponseSchema, { msg }));
  }
  assign(value: AssignInit): void {
    this.send({ case: 'assign', value });
  }
  /** Ends the stream from the control plane's side (status OK, or an error). */
  close(error?: ConnectError): void {
    this.#out.finish(error);
  }
  get outgoing(): Outgoing {
    return this.#out;
  }
  of<C extends NonNullable<ConnectRequest['msg']['case']>>(
    kind: C,
  ): Extract<ConnectRequest['msg'], { case: C }>['value'][] {
    return this.received.filter((r) => r.msg.case === kind).map((r) => r.msg.value) as never;
  }
}

export interface FakeOptions {
  keepaliveIntervalMs?: number;
  /** Versions spoken; a Hello naming another is refused with FAILED_PRECONDITION. */
  versions?: number[];
  /** Welcome.max_reconnect_backoff; unset when not given. */
  maxReconnectBackoffMs?: number;
  /** Welcome.replica_id. Default 'fake'. */
  replicaId?: string;
}

export class FakeAgentService {
  readonly streams: FakeStream[] = [];
  url = '';
  keepaliveIntervalMs: number;
  versions: number[];
  maxReconnectBackoffMs: number | undefined;
  replicaId: string;
  ackFinished = true;
  /** False: store Log lines but send no LogAck (lines taken, never confirmed as stored). */
  ackLogs = true;
  /** False: accept Hello but never answer it (the agent must give up and reconnect). */
  sendWelcome = true;
  /** Welcome.superseded for a Hello.held entry when this returns true (else resumed). */
  isSuperseded: (ref: AttemptRef) => boolean = () => false;
  /** Runs after Welcome is queued on a new stream. */
  onConnect: (stream: FakeStream) => void = () => {};
  /** Every Log entry stored once per (ti, try, seq), as the real store does. */
  readonly logs = new Map<string, Map<number, LogEntry>>();
  /** Applied Finished reports, by ti/try. */
  readonly finished = new Map<string, Finished[]>();
  /** Hellos refused. */
  refused = 0;
  http2Pings = 0;
  #server: http2.Http2Server | null = null;
  readonly #sessions = new Set<http2.ServerHttp2Session>();

  constructor(opts: FakeOptions = {}) {
    this.keepaliveIntervalMs = opts.keepaliveIntervalMs ?? 100;
    this.versions = opts.versions ?? [ProtocolVersion.PROTOCOL_VERSION_2];
    this.maxReconnectBackoffMs = opts.maxReconnectBackoffMs;
    this.replicaId = opts.replicaId ?? 'fake';
  }

  async start(port = 0): Promise<this> {
    const handler = connectNodeAdapter({
      routes: (r) => r.service(AgentService, { connect: (reqs) => this.#connect(reqs) }),
    });
    const server = http2.createServer(handler);
    server.on('session', (s) => {
      this.#sessions.add(s);
      s.on('ping', () => this.http2Pings++);
      s.on('close', () => this.#sessions.delete(s));
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, '127.0.0.1', () => resolve());
    });
    this.#server = server;
    this.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    return this;
  }

  async close(): Promise<void> {
    for (const s of this.streams) s.close();
    for (const s of this.#sessions) s.destroy();
    await new Promise<void>((resolve) => (this.#server ? this.#server.close(() => resolve()) : resolve()));
  }

  /** The newest stream that is still open. */
  get current(): FakeStream | undefined {
    return [...this.streams].reverse().find((s) => !s.peerEnded);
  }

  /** Every message the agent sent, over all streams. */
  all(): ConnectRequest[] {
    return this.streams.flatMap((s) => s.received);
  }

  async waitFor<T>(what: string, fn: () => T | undefined | false, timeoutMs = 5000): Promise<T> {
    const until = Date.now() + timeoutMs;
    for (;;) {
      const v = fn();
      if (v !== undefined && v !== false) return v;
      if (Date.now() > until) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
      await new Promise((r) => setTimeout(r, 10));
    }
  }

  async *#connect(reqs: AsyncIterable<ConnectRequest>): AsyncIterable<ConnectResponse> {
    const it = reqs[Symbol.asyncIterator]();
    const first = await it.next();
    if (first.done || first.value.msg.case !== 'hello')
      throw new ConnectError('hello: must be the first message', Code.InvalidArgument);
    const hello = first.value.msg.value;
    if (!this.versions.includes(hello.protocolVersion)) {
      this.refused++;
      throw new ConnectError(
        `protocol_version ${hello.protocolVersion} is not supported; this control plane speaks ${this.versions.join(', ')}`,
        Code.FailedPrecondition,
      );
    }
    const stream = new FakeStream(this.streams.length + 1, hello);
    this.streams.push(stream);
    const resumed = hello.held.filter((h) => !this.isSuperseded(h));
    const superseded = hello.held.filter((h) => this.isSuperseded(h));
    if (this.sendWelcome)
      stream.send({
        case: 'welcome',
        value: {
          protocolVersion: ProtocolVersion.PROTOCOL_VERSION_2,
          replicaId: this.replicaId,
          keepaliveInterval: durationFromMs(this.keepaliveIntervalMs),
          ...(this.maxReconnectBackoffMs === undefined
            ? {}
            : { maxReconnectBackoff: durationFromMs(this.maxReconnectBackoffMs) }),
          resumed,
          superseded,
        },
      });
    this.onConnect(stream);
    void (async () => {
      try {
        for (;;) {
          const n = await it.next();
          if (n.done) break;
          this.#handle(stream, n.value);
        }
      } catch {
        // the agent cancelled the stream
      } finally {
        stream.peerEnded = true;
        stream.close();
      }
    })();
    yield* stream.outgoing;
  }

  #handle(stream: FakeStream, req: ConnectRequest): void {
    stream.received.push(req);
    const m = req.msg;
    if (m.case === 'keepalive' && !stream.deaf) {
      stream.send({ case: 'keepaliveAck', value: { seq: m.value.seq } });
    } else if (m.case === 'log') {
      const key = refKey(m.value.attempt!);
      const byseq = this.logs.get(key) ?? new Map<number, LogEntry>();
      this.logs.set(key, byseq);
      for (const e of m.value.entries) if (!byseq.has(e.seq)) byseq.set(e.seq, e);
      let last = 0;
      while (byseq.has(last + 1)) last++;
      if (this.ackLogs) stream.send({ case: 'logAck', value: { attempt: m.value.attempt, lastSeq: last } });
    } else if (m.case === 'finished' && this.ackFinished) {
      const key = refKey(m.value.attempt!);
      this.finished.set(key, [...(this.finished.get(key) ?? []), m.value]);
      stream.send({ case: 'finishedAck', value: { attempt: m.value.attempt, applied: true } });
    }
  }

  /** Stored lines of ti/try in seq order, checking seq runs 1..n with no gap. */
  lines(tiId: string, tryNumber = 1): LogEntry[] {
    const byseq = this.logs.get(`${tiId}/${tryNumber}`) ?? new Map<number, LogEntry>();
    const seqs = [...byseq.keys()].sort((a, b) => a - b);
    seqs.forEach((s, i) => {
      if (s !== i + 1) throw new Error(`log seq gap for ${tiId}/${tryNumber}: ${seqs.join(',')}`);
    });
    return seqs.map((s) => byseq.get(s)!);
  }
}

export function refKey(ref: AttemptRef): string {
  return `${ref.tiId}/${ref.tryNumber}`;
}
