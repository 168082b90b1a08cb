import { randomUUID } from 'node:crypto';
import type { MessageInitShape } from '@bufbuild/protobuf';
import { durationFromMs } from '@bufbuild/protobuf/wkt';
import { Code, ConnectError } from '@connectrpc/connect';
import type { Logger } from 'pino';
import type { Attempt, AttemptResult, LogStream } from '../core/attempt.js';
import { secretEnvToWire } from '../core/secret-ref.js';
import type { LogsSoFar } from '../db/logs.js';
import type { AgentHandle, AgentRegistry, AssignResult } from '../executors/agent-registry.js';
import { ConnectResponseSchema, ProtocolVersion, type ConnectRequest, type Hello } from '../gen/leoflow/v1/agent_pb.js';
import { checkAgentCredential, type AgentCredentials } from './agent-credential.js';
import { AsyncQueue } from './async-queue.js';
import { checkAgentCertificate, type ClientCertificate } from './tls-identity.js';
import type { HeartbeatBuffer, HeartbeatSource, HeldRef } from './heartbeat-buffer.js';
import { AgentMessageError, parseReport, validateHelloFields } from './validate-agent-message.js';

type Response = MessageInitShape<typeof ConnectResponseSchema>;

export const SUPPORTED_PROTOCOL_VERSIONS = [ProtocolVersion.PROTOCOL_VERSION_1];

/** An attempt ended at Hello because an earlier process of the agent was given it. */
export interface AbandonedAttempt {
  tiId: string;
  runId: string;
  taskId: string;
  tryNumber: number;
  verdict: 'up_for_retry' | 'failed';
  /** The earlier process (incarnation) that was given it. */
  deliveredTo: string;
}

/** The store operations a session reports through, each fenced by the attempt's token. */
export interface SessionStore {
  /**
   * A one-shot agent is recorded as draining: it takes only its own task instance. Null, and
   * nothing written, when another process of the agent holds it on a stream seen within `liveMs`.
   */
  connectAgent(hello: {
    agentId: string;
    labels: Record<string, string>;
    capabilities: string[];
    slots: number;
    sessionId: string;
    protocolVersion: number;
    incarnationId: string;
    liveMs: number;
    oneShot: boolean;
  }): Promise<{ draining: boolean } | null>;
  disconnectAgent(agentId: string, sessionId: string): Promise<void>;
  /** The attempt tokens, of these, that are still current for this agent; each is now this process's. */
  currentAttempts(agentId: string, incarnationId: string, refs: HeldRef[]): Promise<Set<string>>;
  /**
   * Ends, as lost, the attempts of this agent that an earlier process of it was given and this
   * one does not hold (call after `currentAttempts`): they are retried with a new token.
   */
  endAbandoned(agentId: string, incarnationId: string): Promise<AbandonedAttempt[]>;
  /** How much of each attempt's log is stored (for attempts an agent re-attached to). */
  logsSoFar(refs: HeldRef[]): Promise<Map<string, LogsSoFar>>;
  /** The attempts given to this agent that no process of it has been sent (queued for it), or only this one. */
  undelivered(agentId: string, incarnationId: string): Promise<Attempt[]>;
  /** Records that the attempt is sent to this process; false when it must not be (another has it, or it is over). */
  deliver(attempt: Attempt, agentId: string, incarnationId: string): Promise<boolean>;
  started(ref: HeldRef, pid: number, agentId: string): Promise<boolean>;
  log(ref: HeldRef, stream: LogStream, line: string, seq: number): void;
  /** Settles once every line given to `log` so far is written; rejects when they could not be. */
  logsWritten(): Promise<void>;
  /** `runId` is the attempt's run when this call recorded the end (for a targeted step). */
  finished(ref: HeldRef, result: AttemptResult): Promise<{ outcome: 'applied' | 'refused'; runId: string | null }>;
  /** Claims a one-shot agent's task instance for it (`--once --ti`). */
  claimOnly(tiId: string, agentId: string): Promise<Attempt | null>;
  /**
   * The attempt of this TI with this token, taken by this agent if no other agent has it and it
   * is still queued or running: what a pod started for one attempt runs. Never claims.
   */
  takeAttempt(tiId: string, attemptToken: string, agentId: string): Promise<Attempt | null>;
}

export type AgentMessageKind = 'hello' | 'started' | 'log' | 'finished' | 'keepalive';

export interface AgentConnectionDeps {
  store: SessionStore;
  registry: AgentRegistry;
  heartbeats: HeartbeatBuffer;
  logger: Logger;
  replicaId: string;
  keepaliveMs: number;
  /** Sent in each Assign: the grace the control plane allows a stopped attempt (`--kill-grace`). */
  killGraceMs: number;
  /** Sent in Welcome: the longest reconnect delay agents should use (see agent-fleet.ts). */
  maxReconnectBackoffMs: number;
  /** Sent in Welcome: how long an attempt may go without a heartbeat before it is lost. */
  heartbeatThresholdMs: number;
  /** True once this replica is shutting down: a new agent stream is refused (UNAVAILABLE). */
  leaving(): boolean;
  /** What a Hello's credential is checked against (agent-credential.ts). */
  agentCredentials: AgentCredentials;
  /** An agent connected or left: placement must look again. */
  onFleetChanged(): void;
  /** An attempt's Finished arrived (not written yet): its process is over, its slot free. */
  onFinishing(agentId: string, attemptToken: string): void;
  /** An attempt's end was written or refused (in this run, when known): the scheduler should step. */
  onFinished(agentId: string, runId: string | null, attemptToken: string): void;
  /** Attempts an earlier process of an agent was given were ended at its Hello: their retries follow. */
  onAbandoned(attempts: AbandonedAttempt[]): void;
  /** A message refused: `stale`, about a superseded attempt; `invalid`, breaking the protocol's rules. */
  onRejected(report: AgentMessageKind, why: 'stale' | 'invalid'): void;
}

const HELLO_TIMEOUT_MS = 10_000;

/** The version: a refusal a retry cannot fix, with a code of its own. */
function checkHelloAccess(h: Hello): void {
  if (!SUPPORTED_PROTOCOL_VERSIONS.includes(h.protocolVersion)) {
    throw new ConnectError(
      `agent speaks protocol version ${h.protocolVersion}; this control plane speaks ${SUPPORTED_PROTOCOL_VERSIONS.join(', ')}`,
      Code.FailedPrecondition,
    );
  }
}

/** The kind of a message, for counting a refusal (an empty one counts with Hello: the protocol's own). */
function kindOf(req: ConnectRequest): AgentMessageKind {
  const c = req.msg.case;
  return c === 'started' || c === 'log' || c === 'finished' || c === 'keepalive' ? c : 'hello';
}

/**
 * One agent stream, from Hello to close: registered in the registry once welcomed, looped over
 * the agent's reports, and always deregistered (and the agent marked disconnected) in `finally`.
 * A stream that stops delivering keepalives — a deaf stream behind a live connection — is closed
 * after three intervals, so it is never assigned work nor counted as a heartbeat again.
 *
 * Every report is checked whole before it joins a write shared with other agents; one that breaks
 * the rules ends this stream alone with INVALID_ARGUMENT, except a Finished whose end is
 * inconsistent: that one is refused alone (its attempt failed), so the stream's others go on. Each Assign is recorded as sent to this
 * agent process (its incarnation) before it is sent, so no attempt reaches two processes.
 */
export class AgentConnection implements AgentHandle {
  readonly sessionId = randomUUID();
  agentId = '';
  incarnationId = '';
  readonly #out = new AsyncQueue<Response>();
  readonly #held = new Map<string, HeldRef>();
  /**
   * By attempt token, the highest log seq stored with none missing before it, for each attempt
   * this stream may send lines of (assigned or resumed here, and not finished): Log is only
   * stored in order, and LogAck says up to where.
   */
  readonly #logSeq = new Map<string, number>();
  /** Tokens of the attempts this stream was sent Cancel for: still reported, not zombies. */
  readonly #cancelled = new Set<string>();
  /** Tokens whose Finished arrived and is being written: listed by keepalives until acked. */
  readonly #finishing = new Set<string>();
  #lastKeepalive = Date.now();
  #goneAway = false;
  #log: Logger;

  constructor(private readonly deps: AgentConnectionDeps) {
    this.#log = deps.logger;
  }

  // --- AgentHandle: what the executor and the control plane push down the stream ---------

  async assign(a: Attempt): Promise<AssignResult> {
    if (this.#out.closed || this.#goneAway) return 'gone';
    // The same attempt can reach the stream twice (placement and a one-shot claim, or a
    // notification racing a reconnect): send it once. Taken before the delivery is recorded, so
    // a second call meanwhile sends nothing either.
    if (this.#held.get(a.tiId)?.attemptToken === a.attemptToken) return 'sent';
    const ref = { tiId: a.tiId, tryNumber: a.tryNumber, attemptToken: a.attemptToken };
    this.#held.set(a.tiId, ref);
    this.#logSeq.set(a.attemptToken, 0);
    let recorded: boolean;
    try {
      recorded = await this.deps.store.deliver(a, this.agentId, this.incarnationId);
    } catch (err) {
      if (this.#held.get(a.tiId) === ref) this.#held.delete(a.tiId);
      throw err;
    }
    if (!recorded) {
      if (this.#held.get(a.tiId) === ref) this.#held.delete(a.tiId);
      this.#log.warn({ tiId: a.tiId, runId: a.runId, try: a.tryNumber }, `attempt not sent to agent ${this.agentId}: another process of the agent was given it, or it is over`);
      return 'refused';
    }
    this.#log.info({ tiId: a.tiId, runId: a.runId, taskId: a.taskId, try: a.tryNumber }, `assigned ${a.taskId} to agent ${this.agentId}`);
    const pushed = this.#out.push({
      msg: {
        case: 'assign',
        value: {
          attempt: ref,
          dagId: a.dagId,
          runId: a.runId,
          taskId: a.taskId,
          maxTries: a.maxTries,
          command: a.command,
          env: a.env,
          // References only: the agent reads the values on its own machine.
          secretEnv: secretEnvToWire(a.secretEnv),
          cwd: a.cwd ?? '',
          timeout: a.timeoutMs === null ? undefined : durationFromMs(a.timeoutMs),
          killGrace: durationFromMs(this.deps.killGraceMs),
          traceparent: a.trace?.traceparent ?? '',
          tracestate: a.trace?.tracestate ?? '',
        },
      },
    });
    // Closed while the delivery was recorded: nothing was sent, so the claim may be given back.
    return pushed ? 'sent' : 'gone';
  }

  cancel(tiId: string, reason: string): boolean {
    const r = this.#held.get(tiId);
    if (!r) return false;
    this.#cancelled.add(r.attemptToken);
    return this.#out.push({ msg: { case: 'cancel', value: { attempt: r, reason } } });
  }

  drain(reason: string, undrain = false): void {
    this.#out.push({ msg: { case: 'drain', value: { reason, undrain } } });
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

  close(reason: string): void {
    this.#log.info(`agent ${this.agentId} stream closed: ${reason}`);
    this.#out.close(new ConnectError(reason, Code.Aborted));
  }

  // --- the stream ------------------------------------------------------------------------

  async *run(requests: AsyncIterable<ConnectRequest>, signal: AbortSignal, clientCert?: ClientCertificate | null): AsyncGenerator<Response> {
    const it = requests[Symbol.asyncIterator]();
    const first = await Promise.race([
      it.next(),
      new Promise<never>((_, reject) => setTimeout(() => reject(new ConnectError(`no Hello within ${HELLO_TIMEOUT_MS} ms`, Code.DeadlineExceeded)), HELLO_TIMEOUT_MS).unref()),
    ]);
    if (first.done || first.value.msg.case !== 'hello') {
      throw new ConnectError('the first message on the stream must be Hello', Code.InvalidArgument);
    }
    const hello = first.value.msg.value;
    checkHelloAccess(hello);
    // Under mTLS a pod's one-shot agent has no certificate of its pod's name: it may come without
    // one, and then only its attempt's token, for that pod's id, lets it in (agent-credential.ts).
    const podWithoutCertificate = clientCert === null && hello.onlyAttemptToken !== '';
    if (!podWithoutCertificate) checkAgentCertificate(clientCert, hello.agentId);
    const held = this.#valid('hello', () => validateHelloFields(hello));
    await checkAgentCredential(hello, this.deps.agentCredentials, { certified: clientCert != null, podWithoutCertificate });
    this.agentId = hello.agentId;
    this.incarnationId = hello.incarnationId;
    this.#log = this.deps.logger.child({ agentId: hello.agentId, session: this.sessionId.slice(0, 8), incarnation: hello.incarnationId.slice(0, 8) });
    const { store, registry } = this.deps;

    // A live stream of this agent id from another process: a duplicate id never takes its place.
    // The same process (its stream half-dead, it reconnected) takes over its own.
    const live = registry.get(hello.agentId);
    if (live && live.incarnationId !== hello.incarnationId) throw this.#heldElsewhere();
    const connected = await store.connectAgent({
      agentId: hello.agentId,
      labels: hello.labels,
      capabilities: hello.capabilities,
      slots: hello.slots,
      sessionId: this.sessionId,
      protocolVersion: hello.protocolVersion,
      incarnationId: hello.incarnationId,
      liveMs: 3 * this.deps.keepaliveMs,
      oneShot: hello.onlyTiId !== '0' && hello.onlyTiId !== '',
    });
    if (!connected) throw this.#heldElsewhere();
    // Checked after the write: the replica's agents are marked gone when it starts to leave, and
    // a Hello written after that is undone here.
    if (this.deps.leaving()) {
      await store.disconnectAgent(hello.agentId, this.sessionId).catch((err: unknown) => this.#log.error({ err }, 'could not mark a refused agent disconnected'));
      throw new ConnectError(`replica ${this.deps.replicaId} is shutting down: connect to another`, Code.Unavailable);
    }
    if (live) live.close(`replaced by a newer stream of the same agent process (session ${this.sessionId.slice(0, 8)})`);

    const current = await store.currentAttempts(hello.agentId, hello.incarnationId, held);
    const resumed = held.filter((r) => current.has(r.attemptToken));
    const superseded = held.filter((r) => !current.has(r.attemptToken));
    for (const r of resumed) this.#held.set(r.tiId, r);
    const logs = await store.logsSoFar(resumed);
    for (const r of resumed) this.#logSeq.set(r.attemptToken, logs.get(`${r.tiId}/${r.tryNumber}`)?.lastSeq ?? 0);
    // The agent still holds attempts that were given to someone else meanwhile: a zombie's claim.
    for (const r of superseded) {
      this.deps.onRejected('hello', 'stale');
      this.#log.warn({ tiId: r.tiId, try: r.tryNumber }, 'agent reconnected holding a superseded attempt: it is told to stop it');
    }
    // What an earlier process of this agent was given and this one does not hold is over: retried
    // with a new token, never sent here with the old one.
    const abandoned = await store.endAbandoned(hello.agentId, hello.incarnationId);
    for (const a of abandoned) {
      this.#log.warn(
        { tiId: a.tiId, runId: a.runId, taskId: a.taskId, try: a.tryNumber, verdict: a.verdict, earlierIncarnation: a.deliveredTo },
        `task ${a.taskId} lost: agent ${hello.agentId} restarted and no longer holds it: ${a.verdict}`,
      );
    }
    if (abandoned.length > 0) this.deps.onAbandoned(abandoned);
    this.#out.push({
      msg: {
        case: 'welcome',
        value: {
          protocolVersion: hello.protocolVersion,
          replicaId: this.deps.replicaId,
          keepaliveInterval: durationFromMs(this.deps.keepaliveMs),
          maxReconnectBackoff: durationFromMs(this.deps.maxReconnectBackoffMs),
          heartbeatThreshold: durationFromMs(this.deps.heartbeatThresholdMs),
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
    const source: HeartbeatSource = {
      agentId: this.agentId,
      sessionId: this.sessionId,
      superseded: (refs) => this.#superseded(refs),
      refused: (err) => this.#out.close(new ConnectError(`heartbeat not recorded: ${(err as Error).message}`, Code.InvalidArgument)),
    };
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
          const a = hello.onlyAttemptToken !== ''
            ? await store.takeAttempt(hello.onlyTiId, hello.onlyAttemptToken, this.agentId)
            : await store.claimOnly(hello.onlyTiId, this.agentId);
          const sent = a !== null && (await this.assign(a)) === 'sent';
          this.drain(sent ? 'one-shot agent: no more work after this attempt' : `task instance ${hello.onlyTiId} has no attempt for this agent`);
        } else {
          const undelivered = await store.undelivered(this.agentId, this.incarnationId);
          await Promise.all(undelivered.filter((a) => !this.#held.has(a.tiId)).map((a) => this.assign(a)));
          if (connected.draining) this.drain('agent is drained');
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

  #heldElsewhere(): ConnectError {
    this.#log.warn(`agent ${this.agentId} refused: another process holds this agent id on a live stream`);
    return new ConnectError(
      `agent_id ${JSON.stringify(this.agentId)} is held by another process on a live stream (a different hello.incarnation_id): agent ids must be unique; retry once that stream has ended`,
      Code.AlreadyExists,
    );
  }

  /**
   * Checks a message by `check`: one that breaks a rule is counted, logged in one line, and ends
   * this stream (and no other) with INVALID_ARGUMENT naming the field and the rule.
   */
  #valid<T>(kind: AgentMessageKind, check: () => T): T {
    try {
      return check();
    } catch (err) {
      if (!(err instanceof AgentMessageError)) throw err;
      this.deps.onRejected(kind, 'invalid');
      this.#log.warn({ report: kind, field: err.field, rule: err.rule }, `agent message refused: ${err.message}`);
      throw new ConnectError(err.message, Code.InvalidArgument);
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
      // Ended (and acknowledged) since the keepalive that listed it, or cancelled and stopping
      // (its Finished is awaited): not a zombie.
      const held = this.#held.get(r.tiId);
      if (!held || held.attemptToken !== r.attemptToken || this.#cancelled.has(r.attemptToken) || this.#finishing.has(r.attemptToken)) continue;
      this.deps.onRejected('keepalive', 'stale');
      this.#log.warn({ tiId: r.tiId, try: r.tryNumber }, 'agent holds a superseded attempt: cancelling it');
      this.#out.push({ msg: { case: 'cancel', value: { attempt: r, reason: 'attempt superseded (declared lost or cancelled)' } } });
    }
  }

  /** Records an attempt's end and answers FinishedAck; `refused` names the rule a report broke. */
  #finish(r: HeldRef, result: AttemptResult, refused: string): void {
    this.#logSeq.delete(r.attemptToken);
    this.#finishing.add(r.attemptToken);
    this.deps.onFinishing(this.agentId, r.attemptToken);
    this.#track(
      this.deps.store.finished(r, result).then(({ outcome, runId }) => {
        if (outcome === 'refused' && refused === '') this.deps.onRejected('finished', 'stale');
        if (this.#held.get(r.tiId)?.attemptToken === r.attemptToken) this.#held.delete(r.tiId);
        this.#cancelled.delete(r.attemptToken);
        this.#finishing.delete(r.attemptToken);
        this.#out.push({ msg: { case: 'finishedAck', value: { attempt: r, applied: outcome === 'applied' && refused === '', refused } } });
        this.deps.onFinished(this.agentId, runId, r.attemptToken);
      }),
    );
  }

  async #handle(req: ConnectRequest, source: HeartbeatSource): Promise<void> {
    const { store } = this.deps;
    const report = this.#valid(kindOf(req), () => parseReport(req));
    switch (report.type) {
      case 'keepalive': {
        this.#lastKeepalive = Date.now();
        this.deps.heartbeats.note(source, report.held);
        this.#out.push({ msg: { case: 'keepaliveAck', value: { seq: report.seq } } });
        return;
      }
      case 'started': {
        const r = report.ref;
        this.#held.set(r.tiId, r);
        // Not awaited: the replica's report batcher writes this with every other report waiting,
        // in order (an attempt's Started before its Finished), while this loop reads on.
        this.#track(
          store.started(r, report.pid, this.agentId).then((ok) => {
            if (ok) return;
            this.deps.onRejected('started', 'stale');
            this.#out.push({ msg: { case: 'cancel', value: { attempt: r, reason: 'attempt superseded' } } });
          }),
        );
        return;
      }
      case 'log': {
        const r = report.ref;
        let last = this.#logSeq.get(r.attemptToken);
        if (last === undefined) {
          // Not assigned to nor resumed on this stream, or after its Finished: nothing to store.
          this.deps.onRejected('log', 'stale');
          this.#log.warn({ tiId: r.tiId, try: r.tryNumber }, 'Log for an attempt this stream does not hold (or after its Finished): not stored');
          return;
        }
        // A seq already stored is a resend (skipped); one past a gap stops the batch: LogAck
        // tells the agent where to resume.
        for (const e of report.entries) {
          if (e.seq <= last) continue;
          if (e.seq !== last + 1) break;
          store.log(r, e.stream, e.line, e.seq);
          last = e.seq;
        }
        this.#logSeq.set(r.attemptToken, last);
        const lastSeq = last;
        this.#track(store.logsWritten().then(() => void this.#out.push({ msg: { case: 'logAck', value: { attempt: r, lastSeq } } })));
        return;
      }
      case 'invalid-finished': {
        // Refused alone: its attempt is ended as failed (so it is retried, not left running with
        // no one reporting it), and the stream's other attempts go on.
        const r = report.ref;
        this.deps.onRejected('finished', 'invalid');
        this.#log.warn({ report: 'finished', field: report.error.field, rule: report.error.rule }, `agent message refused: ${report.error.message}`);
        const result: AttemptResult = { outcome: 'failed', exitCode: null, signal: null, error: `the agent's Finished was invalid: ${report.error.message}` };
        this.#finish(r, result, report.error.message);
        return;
      }
      case 'finished':
        this.#finish(report.ref, report.result, '');
        return;
    }
  }
}
