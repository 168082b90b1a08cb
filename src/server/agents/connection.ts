// One agent stream on the control plane, from Hello to close, and the handle through which work
// is pushed down it (Assign, Cancel, Drain, Reconnect). Hello's checks, the reports and the held
// attempts, the admission and the resume with Welcome are each in a file of their own (hello.ts,
// reports.ts, held-attempts.ts, admit-agent.ts, resume-agent.ts).
import { randomUUID } from 'node:crypto';
import type { MessageInitShape } from '@bufbuild/protobuf';
import { durationFromMs } from '@bufbuild/protobuf/wkt';
import { Code, ConnectError } from '@connectrpc/connect';
import type { Logger } from 'pino';
import type { Attempt } from '../../core/attempt.js';
import { fingerprint } from '../../core/fingerprint.js';
import { secretEnvToWire } from '../../core/secret-ref.js';
import type { AgentHandle, AssignResult } from './agent-registry.js';
import { ConnectResponseSchema, type ConnectRequest, type Hello } from '../../gen/leoflow/v1/agent_pb.js';
import type { AgentConnectionDeps } from './connection-deps.js';
import { admitAgent, isOneShot } from './admit-agent.js';
import { readHello } from './hello.js';
import { resumeAgent } from './resume-agent.js';
import { AgentReports, validMessage } from './reports.js';
import { AsyncQueue } from './async-queue.js';
import type { HeartbeatSource, HeldRef } from './heartbeat-buffer.js';
import { StreamAttempts } from './held-attempts.js';
import type { AgentTokenUsed } from '../auth/agent-credential.js';
import type { ClientCertificate } from '../auth/tls-identity.js';

type Response = MessageInitShape<typeof ConnectResponseSchema>;

/**
 * One agent stream, from Hello to close: registered in the registry once welcomed, looped over
 * the agent's reports, and always deregistered (and the agent marked disconnected) in `finally`.
 * A stream that stops delivering keepalives — a deaf stream behind a live connection — is closed
 * after three intervals, so it is never assigned work nor counted as a heartbeat again.
 *
 * Each Assign is recorded as sent to this agent process (its incarnation) before it is sent, so no
 * attempt reaches two processes. The reports are handled by AgentReports (reports.ts).
 */
export class AgentConnection implements AgentHandle {
  readonly sessionId = randomUUID();
  agentId = '';
  incarnationId = '';
  readonly #out = new AsyncQueue<Response>();
  readonly #attempts = new StreamAttempts();
  #lastKeepalive = Date.now();
  #goneAway = false;
  /** The agent ended its stream itself, untold: recorded as a clean stop. */
  #goodbye = false;
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
    if (this.#attempts.held.get(a.tiId)?.attemptToken === a.attemptToken) return 'sent';
    const ref = { tiId: a.tiId, tryNumber: a.tryNumber, attemptToken: a.attemptToken };
    this.#attempts.held.set(a.tiId, ref);
    this.#attempts.logSeq.set(a.attemptToken, 0);
    let recorded: boolean;
    try {
      recorded = await this.deps.store.deliver(a, this.agentId, this.incarnationId);
    } catch (err) {
      if (this.#attempts.held.get(a.tiId) === ref) this.#attempts.held.delete(a.tiId);
      throw err;
    }
    if (!recorded) {
      if (this.#attempts.held.get(a.tiId) === ref) this.#attempts.held.delete(a.tiId);
      this.#log.warn(
        { tiId: a.tiId, runId: a.runId, try: a.tryNumber },
        `attempt not sent to agent ${this.agentId}: another process of the agent was given it, or it is over`,
      );
      return 'refused';
    }
    let inputs;
    try {
      // Read as it is sent, off the scheduler's path: the agent has no database to read them from.
      inputs = a.inputs ?? (a.upstreams ? await this.deps.store.inputs(a) : undefined);
    } catch (err) {
      if (this.#attempts.held.get(a.tiId) === ref) this.#attempts.held.delete(a.tiId);
      throw err;
    }
    this.#log.info(
      { tiId: a.tiId, runId: a.runId, taskId: a.taskId, try: a.tryNumber },
      `assigned ${a.taskId} to agent ${this.agentId}`,
    );
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
          // The variables of `inputs:` are data in the environment, like the rest of env.
          env: inputs && 'env' in inputs ? { ...a.env, ...inputs.env } : a.env,
          inputsJson: inputs && 'json' in inputs ? inputs.json : '',
          inputsError: inputs && 'error' in inputs ? inputs.error : '',
          outputMaxBytes: this.deps.maxOutputBytes,
          outputRequired: a.outputRequired === true,
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
    const r = this.#attempts.held.get(tiId);
    if (!r) return false;
    this.#attempts.cancelled.add(r.attemptToken);
    return this.#out.push({ msg: { case: 'cancel', value: { attempt: r, reason } } });
  }

  drain(reason: string, undrain = false): void {
    this.#out.push({ msg: { case: 'drain', value: { reason, undrain } } });
  }

  goAway(reason: string, replicaUrls: readonly string[]): void {
    if (this.#goneAway) return;
    this.#goneAway = true;
    this.#log.info({ reason, to: replicaUrls }, `told agent ${this.agentId} to reconnect elsewhere`);
    this.#out.push({ msg: { case: 'reconnect', value: { reason, replicaUrls: [...replicaUrls] } } });
  }

  holds(tiId: string): boolean {
    return this.#attempts.held.has(tiId);
  }

  close(reason: string): void {
    this.#log.info(`agent ${this.agentId} stream closed: ${reason}`);
    this.#out.close(new ConnectError(reason, Code.Aborted));
  }

  // --- the stream ------------------------------------------------------------------------

  /**
   * The stream, in its phases: Hello read and checked, the agent admitted (recorded connected),
   * what it holds resumed, Welcome sent; then its first work and its reports until it ends, and
   * always, in `finally`, deregistered and recorded disconnected.
   */
  async *run(
    requests: AsyncIterable<ConnectRequest>,
    signal: AbortSignal,
    clientCert?: ClientCertificate | null,
  ): AsyncGenerator<Response> {
    const it = requests[Symbol.asyncIterator]();
    const valid = (check: () => HeldRef[]) => validMessage('hello', check, this.deps.onRejected, this.#log);
    const { hello, held, token } = await readHello(it, clientCert, this.deps.agentCredentials, valid);
    this.agentId = hello.agentId;
    this.incarnationId = hello.incarnationId;
    this.#log = this.deps.logger.child({
      agentId: hello.agentId,
      session: this.sessionId.slice(0, 8),
      incarnation: fingerprint(hello.incarnationId),
    });
    const connected = await admitAgent(this.deps, this.sessionId, hello, token, this.#log);
    const resumed = await resumeAgent(this.deps, this.#attempts, (m) => this.#out.push(m), hello, held, this.#log);
    this.deps.registry.register(this);
    const untoken = this.#endWithToken(token);
    const reports = new AgentReports({
      deps: this.deps,
      attempts: this.#attempts,
      out: this.#out,
      log: this.#log,
      agentId: this.agentId,
      onKeepalive: () => {
        this.#lastKeepalive = Date.now();
      },
    });
    const source: HeartbeatSource = {
      agentId: this.agentId,
      sessionId: this.sessionId,
      superseded: (refs) => reports.superseded(refs),
      refused: (err) =>
        this.#out.close(new ConnectError(`heartbeat not recorded: ${(err as Error).message}`, Code.InvalidArgument)),
    };
    this.deps.heartbeats.note(source, resumed);
    const deafCheck = this.#closeWhenDeaf();
    const onAbort = () => this.#out.close();
    signal.addEventListener('abort', onAbort);
    const reader = this.#read(it, hello, connected, reports, source);

    try {
      yield* this.#out;
    } finally {
      clearInterval(deafCheck);
      untoken?.();
      signal.removeEventListener('abort', onAbort);
      this.#out.close();
      this.deps.registry.deregister(this);
      this.deps.heartbeats.forget(source);
      void reader.catch(() => {});
      await this.deps.store
        .disconnectAgent(this.agentId, this.sessionId, this.#goodbye)
        .catch((err: unknown) => this.#log.error({ err }, 'could not mark agent disconnected'));
      this.deps.onFleetChanged();
      this.#log.info(`agent ${this.agentId} disconnected${this.#goodbye ? ': it said goodbye (stopped)' : ''}`);
    }
  }

  /**
   * Let in by an API token: the stream ends when the token is revoked or expires. Drained first,
   * so nothing more is placed here; its attempts are then lost at the heartbeat threshold.
   */
  #endWithToken(token: AgentTokenUsed | null): (() => void) | null {
    const streams = this.deps.agentCredentials.streams;
    if (!token || !streams) return null;
    return streams.open(token, 'agent', (err) => {
      this.#log.warn({ tokenId: token.id }, `agent ${this.agentId} cut off: ${err.rawMessage}`);
      this.drain(err.rawMessage);
      this.#out.close(err);
    });
  }

  /** A stream whose keepalives stopped for three intervals is closed (see the class's comment). */
  #closeWhenDeaf(): NodeJS.Timeout {
    return setInterval(() => {
      if (Date.now() - this.#lastKeepalive > 3 * this.deps.keepaliveMs) {
        this.#log.warn(
          { silentMs: Date.now() - this.#lastKeepalive },
          `agent ${this.agentId} stream is deaf (no keepalive): closing it`,
        );
        this.#out.close(
          new ConnectError('no keepalive for 3 intervals: stream considered dead', Code.DeadlineExceeded),
        );
      }
    }, this.deps.keepaliveMs);
  }

  /** The agent's first work, then its reports until the stream ends; any failure closes the stream. */
  async #read(
    it: AsyncIterator<ConnectRequest>,
    hello: Hello,
    connected: { draining: boolean },
    reports: AgentReports,
    source: HeartbeatSource,
  ): Promise<void> {
    const { store } = this.deps;
    try {
      // Work given to this agent before it connected here (by another replica, or while it
      // was reconnecting), or the one TI of a one-shot agent.
      if (isOneShot(hello)) {
        const a =
          hello.onlyAttemptToken !== ''
            ? await store.takeAttempt(hello.onlyTiId, hello.onlyAttemptToken, this.agentId)
            : await store.claimOnly(hello.onlyTiId, this.agentId);
        const sent = a !== null && (await this.assign(a)) === 'sent';
        this.drain(
          sent
            ? 'one-shot agent: no more work after this attempt'
            : `task instance ${hello.onlyTiId} has no attempt for this agent`,
        );
      } else {
        const undelivered = await store.undelivered(this.agentId, this.incarnationId);
        await Promise.all(undelivered.filter((a) => !this.#attempts.held.has(a.tiId)).map((a) => this.assign(a)));
        if (connected.draining) this.drain('agent is drained');
      }
      this.deps.onFleetChanged();
      for (;;) {
        const next = await it.next();
        if (next.done) break;
        await reports.handle(next.value, source);
      }
      // The agent ended its stream itself without being told to reconnect: its goodbye.
      this.#goodbye = !this.#goneAway;
      this.#out.close();
    } catch (err) {
      this.#out.close(
        err instanceof ConnectError
          ? err
          : new ConnectError(`agent stream failed: ${(err as Error).message}`, Code.Internal),
      );
    }
  }
}
