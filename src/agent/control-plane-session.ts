/**
 * The agent's side of one Connect stream (the control plane's is `server/agents/connection.ts`),
 * from Hello to its end: waits (bounded) for Welcome, then writes the
 * outbox, sends Keepalive every interval, and closes the stream when it goes deaf. It holds no
 * state that outlives the stream; the runtime decides what to do with what arrives.
 */

import { create } from '@bufbuild/protobuf';
import type { Logger } from 'pino';
import {
  ConnectRequestSchema,
  ProtocolVersion,
  type AttemptRef,
  type ConnectRequest,
  type ConnectResponse,
  type Hello,
  type Welcome,
} from '../gen/leoflow/v1/agent_pb.js';
import type { AgentServiceClient, ConnectCall } from './agent-service-client.js';
import { codeName, FATAL_AT_HELLO } from './agent-fatal-error.js';
import { positiveMs } from './attempt-messages.js';
import type { Outbox } from './outbox.js';

/** Without an ack for this many keepalive intervals, the stream is deaf. */
export const DEAF_AFTER_INTERVALS = 3;

export type SessionEnd =
  /** `reconnect`: the control plane asked the agent to go elsewhere (it is shutting down). */
  | { kind: 'closed'; welcomed: boolean; durationMs: number; reason: string; reconnect: boolean; goTo: string[] }
  /** Refused at Hello with a status a retry cannot fix. */
  | { kind: 'fatal'; code: number; message: string };

/** What the session needs from the runtime. */
export interface SessionPeer {
  hello(): Hello;
  /** Welcome arrived; called before anything is written after it. */
  welcomed(welcome: Welcome): void;
  /** Assign, Cancel, Drain, FinishedAck (Reconnect ends the session instead). */
  received(msg: ConnectResponse): void;
  /** KeepaliveAck `seq`: everything written before Keepalive `seq` was taken. */
  acked(seq: number): void;
  /** The attempts held now, for Keepalive.held. */
  held(): AttemptRef[];
  /** Moves buffered log lines into the outbox before it is written. */
  beforeWrite(): void;
  readonly outbox: Outbox<ConnectRequest>;
}

export interface SessionOptions {
  client: AgentServiceClient;
  peer: SessionPeer;
  logger: Logger;
  welcomeTimeoutMs: number;
  /** Used when Welcome gives no keepalive_interval. */
  defaultKeepaliveMs: number;
}

export class ControlPlaneSession {
  readonly #opts: SessionOptions;
  readonly #log: Logger;
  #call: ConnectCall | null = null;
  #welcomed = false;
  #ended = false;
  #blocked = false;
  #closeReason: string | null = null;
  #toldToReconnect = false;
  /** Where a Reconnect said to go (the other live replicas' URLs). */
  #goTo: string[] = [];
  #keepaliveSeq = 0;
  #lastAckAt = 0;
  #intervalMs = 0;
  #timers: NodeJS.Timeout[] = [];

  constructor(opts: SessionOptions) {
    this.#opts = opts;
    this.#log = opts.logger;
  }

  get welcomed(): boolean {
    return this.#welcomed && !this.#ended;
  }

  /** Opens the stream and resolves when it has ended, however it ended. */
  run(): Promise<SessionEnd> {
    const started = Date.now();
    const call = this.#opts.client.connect();
    this.#call = call;
    return new Promise<SessionEnd>((resolve) => {
      // grpc-js emits 'error' before 'status' for a non-OK end; 'status' is the one place to end.
      call.on('error', () => {});
      call.on('data', (msg: ConnectResponse) => this.#onMessage(msg));
      call.on('status', (s: { code: number; details: string }) => {
        this.#ended = true;
        for (const t of this.#timers) clearTimeout(t);
        this.#timers = [];
        if (!this.#welcomed && FATAL_AT_HELLO.has(s.code)) {
          resolve({ kind: 'fatal', code: s.code, message: statusMessage(s.details) });
          return;
        }
        const reason =
          this.#closeReason ??
          (s.code === 0 ? 'the control plane ended the stream' : `${codeName(s.code)}: ${statusMessage(s.details)}`);
        resolve({
          kind: 'closed',
          welcomed: this.#welcomed,
          durationMs: Date.now() - started,
          reason,
          reconnect: this.#toldToReconnect,
          goTo: this.#goTo,
        });
      });
      call.write(create(ConnectRequestSchema, { msg: { case: 'hello', value: this.#opts.peer.hello() } }));
      this.#later(this.#opts.welcomeTimeoutMs, () => {
        if (!this.#welcomed) this.close(`no Welcome within ${this.#opts.welcomeTimeoutMs} ms`, 'cancel');
      });
    });
  }

  /**
   * Ends the stream: `end` half-closes it politely (the control plane then ends its side; a
   * second later it is cancelled anyway), `cancel` resets it at once.
   */
  close(reason: string, how: 'end' | 'cancel'): void {
    const call = this.#call;
    if (!call || this.#ended || this.#closeReason !== null) return;
    this.#closeReason = reason;
    if (how === 'cancel') {
      call.cancel();
      return;
    }
    call.end();
    this.#later(1000, () => call.cancel());
  }

  /** Writes the outbox until it is empty or the stream pushes back (then again on 'drain'). */
  pump(): void {
    const call = this.#call;
    if (!call || !this.welcomed || this.#blocked || this.#closeReason !== null) return;
    this.#opts.peer.beforeWrite();
    const { outbox } = this.#opts.peer;
    while (outbox.peek()) {
      // Confirmed by the ack of the next Keepalive, which is written after this entry.
      const entry = outbox.shift(this.#keepaliveSeq + 1)!;
      if (!call.write(entry.message)) {
        this.#blocked = true;
        call.once('drain', () => {
          this.#blocked = false;
          this.pump();
        });
        return;
      }
    }
  }

  #onMessage(msg: ConnectResponse): void {
    if (this.#ended || this.#closeReason !== null) return;
    if (!this.#welcomed) {
      if (msg.msg.case !== 'welcome') {
        this.close(`protocol error: ${msg.msg.case ?? 'an empty message'} before Welcome`, 'cancel');
        return;
      }
      this.#onWelcome(msg.msg.value);
      return;
    }
    switch (msg.msg.case) {
      case 'keepaliveAck':
        this.#lastAckAt = Date.now();
        this.#opts.peer.acked(Number(msg.msg.value.seq));
        return;
      case 'welcome':
        this.#log.warn('second Welcome on one stream ignored');
        return;
      case undefined:
        this.#log.warn('empty message from the control plane ignored');
        return;
      case 'reconnect':
        // Ended politely, so the control plane still takes what was written before; whatever it
        // did not confirm is written again on the next stream.
        this.#toldToReconnect = true;
        this.#goTo = msg.msg.value.replicaUrls;
        this.close(`the control plane asked for a reconnect: ${msg.msg.value.reason}`, 'end');
        return;
      default:
        this.#opts.peer.received(msg);
    }
  }

  #onWelcome(welcome: Welcome): void {
    if (welcome.protocolVersion !== ProtocolVersion.PROTOCOL_VERSION_2) {
      this.#log.warn(
        { protocolVersion: welcome.protocolVersion },
        'Welcome names another protocol version; going on with version 2',
      );
    }
    this.#welcomed = true;
    this.#intervalMs = Math.max(
      10,
      (welcome.keepaliveInterval && positiveMs(welcome.keepaliveInterval)) ?? this.#opts.defaultKeepaliveMs,
    );
    this.#lastAckAt = Date.now();
    this.#opts.peer.welcomed(welcome);
    const timer = setInterval(() => this.#keepalive(), this.#intervalMs);
    this.#timers.push(timer);
    this.pump();
  }

  #keepalive(): void {
    const call = this.#call;
    if (!call || this.#ended || this.#closeReason !== null) return;
    const silentMs = Date.now() - this.#lastAckAt;
    if (silentMs > DEAF_AFTER_INTERVALS * this.#intervalMs) {
      this.#log.warn(
        { silentMs, keepaliveIntervalMs: this.#intervalMs },
        'stream is deaf (no KeepaliveAck): reconnecting',
      );
      this.close(`deaf: no KeepaliveAck for ${silentMs} ms`, 'cancel');
      return;
    }
    // Lines waiting for the flush timer go first, so this Keepalive's ack confirms them too.
    this.pump();
    this.#keepaliveSeq++;
    // Written past backpressure on purpose: it is small, and a full buffer is no reason to go silent.
    call.write(
      create(ConnectRequestSchema, {
        msg: { case: 'keepalive', value: { seq: BigInt(this.#keepaliveSeq), held: this.#opts.peer.held() } },
      }),
    );
  }

  #later(ms: number, fn: () => void): void {
    const t = setTimeout(fn, ms);
    this.#timers.push(t);
  }
}

/**
 * grpc-message is percent-encoded; grpc-js decodes it with decodeURI, which leaves reserved
 * characters (";", ",", "/", …) encoded. Finish the job, keeping the text when it is not valid.
 */
function statusMessage(details: string): string {
  try {
    return decodeURIComponent(details);
  } catch {
    return details;
  }
}
