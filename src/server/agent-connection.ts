import { randomUUID } from 'node:crypto';
import type { MessageInitShape } from '@bufbuild/protobuf';
import { durationFromMs } from '@bufbuild/protobuf/wkt';
import { Code, ConnectError } from '@connectrpc/connect';
import type { Logger } from 'pino';
import type { Attempt, AttemptResult, LogStream } from '../core/attempt.js';
import type { LogsSoFar } from '../db/logs.js';
import type { AgentHandle, AgentRegistry } from '../executors/agent-registry.js';
import {
  AttemptOutcome,
  ConnectResponseSchema,
  ProtocolVersion,
  type AttemptRef,
  type ConnectRequest,
  type Finished,
  type Hello,
} from '../gen/leoflow/v1/agent_pb.js';
import { AsyncQueue } from './async-queue.js';
import type { HeartbeatBuffer, HeldRef } from './heartbeat-buffer.js';

type Response = MessageInitShape<typeof ConnectResponseSchema>;

export const SUPPORTED_PROTOCOL_VERSIONS = [ProtocolVersion.PROTOCOL_VERSION_1];

/** The store operations a session reports through, each fenced by the attempt's token. */
export interface SessionStore {
  /** A one-shot agent is recorded as draining: it takes only its own task instance. */
  connectAgent(hello: { agentId: string; labels: Record<string, string>; capabilities: string[]; slots: number; sessionId: string; protocolVersion: number; oneShot: boolean }): Promise<{ draining: boolean }>;
  disconnectAgent(agentId: string, sessionId: string): Promise<void>;
  /** The attempt tokens, of these, that are still current for this agent. */
  currentAttempts(agentId: string, refs: HeldRef[]): Promise<Set<string>>;
  /** How much of each attempt's log is stored (for attempts an agent re-attached to). */
  logsSoFar(refs: HeldRef[]): Promise<Map<string, LogsSoFar>>;
  /** The attempts given to this agent that it has not yet been told about (queued for it). */
  undelivered(agentId: string): Promise<Attempt[]>;
  started(ref: HeldRef, pid: number, agentId: string): Promise<boolean>;
  log(ref: HeldRef, stream: LogStream, line: string, seq: number): void;
  /** `runId` is the attempt's run when this call recorded the end (for a targeted step). */
  finished(ref: HeldRef, result: AttemptResult): Promise<{ outcome: 'applied' | 'refused'; runId: string | null }>;
  /** Claims a one-shot agent's task instance for it (`--once --ti`). */
  claimOnly(tiId: string, agentId: string): Promise<Attempt | null>;
}

export interface AgentConnectionDeps {
  store: SessionStore;
  registry: AgentRegistry;
  heartbeats: HeartbeatBuffer;
  logger: Logger;
  replicaId: string;
  keepaliveMs: number;
  /** Sent in Welcome: the longest reconnect delay agents should use (see agent-fleet.ts). */
  maxReconnectBackoffMs: number;
  /** True once this replica is shutting down: a new agent stream is refused (UNAVAILABLE). */
  leaving(): boolean;
  /** Shared secret agents must present; null when none is required. */
  agentToken: string | null;
  /** An agent connected or left: placement must look again. */
  onFleetChanged(): void;
  /** An attempt's Finished arrived (not written yet): its process is over, its slot free. */
  onFinishing(agentId: string, attemptToken: string): void;
  /** An attempt's end was written or refused (in this run, when known): the scheduler should step. */
  onFinished(agentId: string, runId: string | null, attemptToken: string): void;
  onRejected(report: 'hello' | 'started' | 'log' | 'finished' | 'keepalive'): void;
}

const AGENT_ID = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$/;
const HELLO_TIMEOUT_MS = 10_000;

function ref(r: AttemptRef | undefined, field: string): HeldRef {
  if (!r || r.tiId === '' || r.tiId === '0' || r.attemptToken === '' || r.tryNumber < 1) {
    throw new ConnectError(`${field}: an attempt (ti_id, try_number, attempt_token) is required`, Code.InvalidArgument);
  }
  return { tiId: r.tiId, tryNumber: r.tryNumber, attemptToken: r.attemptToken };
}

function validateHello(h: Hello, agentToken: string | null): void {
  if (!SUPPORTED_PROTOCOL_VERSIONS.includes(h.protocolVersion)) {
    throw new ConnectError(
      `agent speaks protocol version ${h.protocolVersion}; this control plane speaks ${SUPPORTED_PROTOCOL_VERSIONS.join(', ')}`,
      Code.FailedPrecondition,
    );
  }
  if (!AGENT_ID.test(h.agentId)) {
    throw new ConnectError(`hello.agent_id: must be 1-128 letters, digits, '_', '.', ':' or '-', got ${JSON.stringify(h.agentId)}`, Code.InvalidArgument);
  }
  if (!Number.isInteger(h.slots) || h.slots < 1 || h.slots > 10_000) {
    throw new ConnectError(`hello.slots: must be between 1 and 10000, got ${h.slots}`, Code.InvalidArgument);
  }
  if (agentToken !== null && h.token !== agentToken) throw new ConnectError('hello.token: wrong or missing agent token', Code.Unauthenticated);
}

function resultOf(f: Finished): AttemptResult {
  const outcome =
    f.outcome === AttemptOutcome.SUCCESS ? 'success'
    : f.outcome === AttemptOutcome.TIMED_OUT ? 'timed_out'
    : f.outcome === AttemptOutcome.CANCELLED ? 'cancelled'
    : f.outcome === AttemptOutcome.SPAWN_FAILED ? 'spawn_failed'
    : 'failed';
  return {
    outcome,
    exitCode: f.exitCode ?? null,
    signal: (f.signal || null) as NodeJS.Signals | null,
    error: f.error || (outcome === 'failed' && f.exitCode !== undefined ? `exit code ${f.exitCode}` : null),
  };
}

/**
 * One agent stream, from Hello to close: registered in the registry once welcomed, looped over
 * the agent's reports, and always deregistered (and the agent marked disconnected) in `finally`.
 * A stream that stops delivering keepalives — a deaf stream behind a live connection — is closed
 * after three intervals, so it is never assigned work nor counted as a heartbeat again.
 */
export class AgentConnection implements AgentHandle {
  readonly sessionId = randomUUID();
  agentId = '';
  readonly #out = new AsyncQueue<Response>();
  readonly #held = new Map<string, HeldRef>();
  #lastKeepalive = Date.now();
  #goneAway = false;
  #log: Logger;

  constructor(private readonly deps: AgentConnectionDeps) {
    this.#log = deps.logger;
  }

  // --- AgentHandle: what the executor and the control plane push down the stream ---------

  assign(a: Attempt): boolean {
    if (this.#out.closed || this.#goneAway) return false;
    // The same attempt can reach the stream twice (placement and a one-shot claim, or a
    // notification racing a reconnect): send it once.
    if (this.#held.get(a.tiId)?.attemptToken === a.attemptToken) return true;
    this.#held.set(a.tiId, { tiId: a.tiId, tryNumber: a.tryNumber, attemptToken: a.attemptToken });
    this.#log.info({ tiId: a.tiId, runId: a.runId, taskId: a.taskId, try: a.tryNumber }, `assigned ${a.taskId} to agent ${this.agentId}`);
    return this.#out.push({
      msg: {
        case: 'assign',
        value: {
          attempt: { tiId: a.tiId, tryNumber: a.tryNumber, attemptToken: a.attemptToken },
          dagId: a.dagId,
          runId: a.runId,
          taskId: a.taskId,
          maxTries: a.maxTries,
          command: a.command,
          env: a.env,
          cwd: a.cwd ?? '',
          timeout: a.timeoutMs === null ? undefined : durationFromMs(a.timeoutMs),
        },
      },
    });
  }

  cancel(tiId: string, reason: string): boolean {
    const r = this.#held.get(tiId);
    if (!r) return false;
    return this.#out.push({ msg: { case: 'cancel', value: { attempt: r, reason } } });
  }

  drain(reason: string): void {
    this.#out.push({ msg: { case: 'drain', value: { reason } } });
  }

  goAway(reason: string): void {
    if (this.#goneAway) return;
    this.#goneAway = true;
    this.#log.info({ reason }, `told agent ${this.agentId} to reconnect elsewhere`);
    this.#out.push({ msg: { case: 'reconnect', value: { reason } } });
  }

  holds(tiId: string): boolean {
    return this.#held.has(tiId);
  }

  // --- the stream ------------------------------------------------------------------------

  async *run(requests: AsyncIterable<ConnectRequest>, signal: AbortSignal): AsyncGenerator<Response> {
    const it = requests[Symbol.asyncIterator]();
    const first = await Promise.race([
      it.next(),
      new Promise<never>((_, reject) => setTimeout(() => reject(new ConnectError(`no Hello within ${HELLO_TIMEOUT_MS} ms`, Code.DeadlineExceeded)), HELLO_TIMEOUT_MS).unref()),
    ]);
    if (first.done || first.value.msg.case !== 'hello') {
      throw new ConnectError('the first message on the stream must be Hello', Code.InvalidArgument);
    }
    const hello = first.value.msg.value;
    validateHello(hello, this.deps.agentToken);
    this.agentId = hello.agentId;
    this.#log = this.deps.logger.child({ agentId: hello.agentId, session: this.sessionId.slice(0, 8) });
    const { store, registry } = this.deps;

    const { draining } = await store.connectAgent({
      agentId: hello.agentId,
      labels: hello.labels,
      capabilities: hello.capabilities,
      slots: hello.slots,
      sessionId: this.sessionId,
      protocolVersion: hello.protocolVersion,
      oneShot: hello.onlyTiId !== '0' && hello.onlyTiId !== '',
    });
    // Checked after the write: the replica's agents are marked gone when it starts to leave, and
    // a Hello written after that is undone here.
    if (this.deps.leaving()) {
      await store.disconnectAgent(hello.agentId, this.sessionId).catch((err: unknown) => this.#log.error({ err }, 'could not mark a refused agent disconnected'));
      throw new ConnectError(`replica ${this.deps.replicaId} is shutting down: connect to another`, Code.Unavailable);
    }
    const held = hello.held.map((r, i) => ref(r, `hello.held[${i}]`));
    const current = await store.currentAttempts(hello.agentId, held);
    const resumed = held.filter((r) => current.has(r.attemptToken));
    const superseded = held.filter((r) => !current.has(r.attemptToken));
    for (const r of resumed) this.#held.set(r.tiId, r);
    const logs = await store.logsSoFar(resumed);
    // The agent still holds attempts that were given to someone else meanwhile: a zombie's claim.
    for (const r of superseded) {
      this.deps.onRejected('hello');
      this.#log.warn({ tiId: r.tiId, try: r.tryNumber }, 'agent reconnected holding a superseded attempt: it is told to stop it');
    }
    this.#out.push({
      msg: {
        case: 'welcome',
        value: {
          protocolVersion: hello.protocolVersion,
          replicaId: this.deps.replicaId,
          keepaliveInterval: durationFromMs(this.deps.keepaliveMs),
          maxReconnectBackoff: durationFromMs(this.deps.maxReconnectBackoffMs),
          resumed,
          superseded,
          logsSoFar: resumed.map((r) => {
            const so = logs.get(`${r.tiId}/${r.tryNumber}`);
            return { attempt: r, stdoutLines: so?.stdout ?? 0, stderrLines: so?.stderr ?? 0, lastSeq: so?.lastSeq ?? 0 };
          }),
        },
      },
    });
    this.#log.info({ labels: hello.labels, slots: hello.slots, resumed: resumed.length, superseded: superseded.length }, `agent ${hello.agentId} connected`);
    registry.register(this);
    const source = { agentId: this.agentId, sessionId: this.sessionId, superseded: (refs: HeldRef[]) => this.#superseded(refs) };
    this.deps.heartbeats.note(source, resumed);

    const deafCheck = setInterval(() => {
      if (Date.now() - this.#lastKeepalive > 3 * this.deps.keepaliveMs) {
        this.#log.warn({ silentMs: Date.now() - this.#lastKeepalive }, `agent ${this.agentId} stream is deaf (no keepalive): closing it`);
        this.#out.close(new ConnectError('no keepalive for 3 intervals: stream considered dead', Code.DeadlineExceeded));
      }
    }, this.deps.keepaliveMs);
    const onAbort = () => this.#out.close();
    signal.addEventListener('abort', onAbort);

    const reader = (async () => {
      try {
        // Work given to this agent before it connected here (by another replica, or while it
        // was reconnecting), or the one TI of a one-shot agent.
        if (hello.onlyTiId !== '0' && hello.onlyTiId !== '') {
          const a = await store.claimOnly(hello.onlyTiId, this.agentId);
          if (a) this.assign(a);
          this.drain(a ? 'one-shot agent: no more work after this attempt' : `task instance ${hello.onlyTiId} has no attempt for this agent`);
        } else {
          for (const a of await store.undelivered(this.agentId)) if (!this.#held.has(a.tiId)) this.assign(a);
          if (draining) this.drain('agent is drained');
        }
        this.deps.onFleetChanged();
        for (;;) {
          const next = await it.next();
          if (next.done) break;
          await this.#handle(next.value, source);
        }
        this.#out.close();
      } catch (err) {
        this.#out.close(err instanceof ConnectError ? err : new ConnectError(`agent stream failed: ${(err as Error).message}`, Code.Internal));
      }
    })();

    try {
      yield* this.#out;
    } finally {
      clearInterval(deafCheck);
      signal.removeEventListener('abort', onAbort);
      this.#out.close();
      registry.deregister(this);
      this.deps.heartbeats.forget(source);
      void reader.catch(() => {});
      await store.disconnectAgent(this.agentId, this.sessionId).catch((err: unknown) => this.#log.error({ err }, 'could not mark agent disconnected'));
      this.deps.onFleetChanged();
      this.#log.info(`agent ${this.agentId} disconnected`);
    }
  }

  /** A report being written: if the store gives up on it (the database stayed unreachable), the
   *  stream is closed, and the agent reconnects and sends it again. */
  #track(write: Promise<void>): void {
    write.catch((err: unknown) => {
      this.#log.error({ err }, 'could not record an agent report; closing the stream');
      this.#out.close(new ConnectError(`agent report not recorded: ${(err as Error).message}`, Code.Unavailable));
    });
  }

  #superseded(refs: HeldRef[]): void {
    for (const r of refs) {
      // Ended (and acknowledged) since the keepalive that listed it: not a zombie.
      const held = this.#held.get(r.tiId);
      if (!held || held.attemptToken !== r.attemptToken) continue;
      this.deps.onRejected('keepalive');
      this.#log.warn({ tiId: r.tiId, try: r.tryNumber }, 'agent holds a superseded attempt: cancelling it');
      this.#out.push({ msg: { case: 'cancel', value: { attempt: r, reason: 'attempt superseded (declared lost or cancelled)' } } });
    }
  }

  async #handle(req: ConnectRequest, source: { agentId: string; sessionId: string; superseded(refs: HeldRef[]): void }): Promise<void> {
    const { store } = this.deps;
    switch (req.msg.case) {
      case 'keepalive': {
        this.#lastKeepalive = Date.now();
        const held = req.msg.value.held.map((r, i) => ref(r, `keepalive.held[${i}]`));
        this.deps.heartbeats.note(source, held);
        this.#out.push({ msg: { case: 'keepaliveAck', value: { seq: req.msg.value.seq } } });
        return;
      }
      case 'started': {
        const r = ref(req.msg.value.attempt, 'started.attempt');
        this.#held.set(r.tiId, r);
        // Not awaited: the replica's report batcher writes this with every other report waiting,
        // in order (an attempt's Started before its Finished), while this loop reads on.
        this.#track(
          store.started(r, req.msg.value.pid, this.agentId).then((ok) => {
            if (ok) return;
            this.deps.onRejected('started');
            this.#out.push({ msg: { case: 'cancel', value: { attempt: r, reason: 'attempt superseded' } } });
          }),
        );
        return;
      }
      case 'log': {
        const r = ref(req.msg.value.attempt, 'log.attempt');
        for (const e of req.msg.value.entries) {
          const stream: LogStream = e.stream === 'stderr' ? 'stderr' : e.stream === 'system' ? 'system' : 'stdout';
          store.log(r, stream, e.line, e.seq);
        }
        return;
      }
      case 'finished': {
        const r = ref(req.msg.value.attempt, 'finished.attempt');
        this.deps.onFinishing(this.agentId, r.attemptToken);
        this.#track(
          store.finished(r, resultOf(req.msg.value)).then(({ outcome, runId }) => {
            if (outcome === 'refused') this.deps.onRejected('finished');
            if (this.#held.get(r.tiId)?.attemptToken === r.attemptToken) this.#held.delete(r.tiId);
            this.#out.push({ msg: { case: 'finishedAck', value: { attempt: r, applied: outcome === 'applied' } } });
            this.deps.onFinished(this.agentId, runId, r.attemptToken);
          }),
        );
        return;
      }
      case 'hello':
        throw new ConnectError('Hello may only be sent once, first', Code.InvalidArgument);
      default:
        throw new ConnectError('empty message on the agent stream', Code.InvalidArgument);
    }
  }
}
