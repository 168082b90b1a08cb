/**
 * The agent runtime: keeps one Connect stream open to the control plane (reconnecting with
 * jittered backoff, bounded by what Welcome says, to each of its addresses in turn), runs what it
 * is assigned, and stops gracefully.
 */

import path from 'node:path';
import { create } from '@bufbuild/protobuf';
import type { Logger } from 'pino';
import { AGENT_FEATURES } from '../core/agent-features.js';
import { fingerprint } from '../core/fingerprint.js';
import { HelloSchema, ProtocolVersion, type ConnectResponse, type Hello } from '../gen/leoflow/v1/agent_pb.js';
import type { ShutdownMode } from './agent-config.js';
import { ControlPlaneAddresses } from './control-plane-addresses.js';
import { AgentFatalError } from './agent-fatal-error.js';
import { createAgentServiceClient, type AgentTls } from './agent-service-client.js';
import { ControlPlaneSession } from './control-plane-session.js';
import { AttemptRunner } from './attempt-runner.js';
import { positiveMs } from './attempt-messages.js';
import { Backoff, type BackoffOptions } from './backoff.js';
import { PROCESS_INCARNATION_ID } from './incarnation.js';
import type { LogBatcherOptions } from './log-batcher.js';

export interface RunAgentOptions {
  /**
   * http://host:port or https://host:port of control-plane replicas (any of them serves agents).
   * Each reconnect goes to the next one, round robin: a replica that is gone or going away
   * (Reconnect) is left for the next at once.
   */
  serverUrls: readonly string[];
  agentId: string;
  labels?: Record<string, string>;
  capabilities?: string[];
  /** Attempts run at once (the control plane enforces it). Default 1. */
  slots?: number;
  token?: string;
  /** For https:// servers: the CA (null: the system's roots) and the agent's client certificate (mTLS). */
  tls?: AgentTls | null;
  /** One-shot agent: take only the current attempt of this ti, exit once it is acknowledged. */
  onlyTiId?: string | null;
  /** With onlyTiId: the token of the one attempt it was started for (a Kubernetes pod's). */
  onlyAttemptToken?: string | null;
  /** What stop() does by default. Default 'finish'. */
  onShutdown?: ShutdownMode;
  /** Default 30_000. */
  shutdownGraceMs?: number;
  /** Between SIGTERM and SIGKILL when stopping a task whose Assign names no kill grace (an older
   *  control plane). Default 10_000. */
  killGraceMs?: number;
  /** The agent's state directory: its tasks' shims keep their output and status under it. */
  stateDir: string;
  logger: Logger;
  /** No Welcome this long after Hello: reconnect. Default 10_000. */
  welcomeTimeoutMs?: number;
  /** Keepalive interval when Welcome names none. Default 5_000. */
  defaultKeepaliveMs?: number;
  /** Reconnect delays. Default 100 ms doubling to 10 s, full jitter; Welcome may bound them lower. */
  backoff?: BackoffOptions;
  /** HTTP/2 PING interval (grpc.keepalive_time_ms). Default 10_000. */
  http2KeepaliveMs?: number;
  /** How long output lines wait to be batched into one Log. Default 100. */
  logFlushMs?: number;
  logBatcher?: LogBatcherOptions;
  /** After the agent stopped its tasks at shutdown, how long it waits for their FinishedAck. Default 5_000. */
  ackWaitMs?: number;
  /**
   * This process's incarnation (Hello.incarnation_id). Default: the one made for the process; a
   * test that stands for a restarted agent within one process passes a new one.
   */
  incarnationId?: string;
}

export interface AgentExit {
  /** stopped: by stop(); completed: a one-shot agent's attempt was acknowledged (or it was drained). */
  reason: 'stopped' | 'completed' | 'killed';
  /** Attempts whose end the control plane had not acknowledged: its heartbeat reaper will retry them. */
  unacknowledged: number;
}

export interface RunningAgent {
  readonly agentId: string;
  /** Settles when the agent has stopped; rejects with AgentFatalError when refused at Hello. */
  readonly done: Promise<AgentExit>;
  /** Graceful stop (see RunAgentOptions.onShutdown); a second call may escalate finish → handback. */
  stop(mode?: ShutdownMode): Promise<AgentExit>;
  /** Stops at once: SIGKILLs every task's process group and reports nothing. */
  kill(): void;
  /** True while a stream is open and welcomed. */
  readonly connected: boolean;
  /** Attempts held now. */
  readonly held: number;
}

/** Starts the agent; it runs until stopped, killed, completed (--once) or refused. */
export function runAgent(options: RunAgentOptions): RunningAgent {
  const runtime = new AgentRuntime(options);
  const done = runtime.run();
  done.catch(() => {}); // the caller observes `done`; this only prevents an unhandled rejection
  return {
    agentId: options.agentId,
    done,
    stop: (mode) => runtime.stop(mode ?? options.onShutdown ?? 'finish').then(() => done),
    kill: () => runtime.kill(),
    get connected() {
      return runtime.connected;
    },
    get held() {
      return runtime.held;
    },
  };
}

class AgentRuntime {
  readonly #o: RunAgentOptions;
  readonly #log: Logger;
  readonly #runner: AttemptRunner;
  readonly #backoff: Backoff;
  #session: ControlPlaneSession | null = null;
  #exit: AgentExit | null = null;
  #stopping: Promise<void> | null = null;
  #drained = false;
  #assigned = false;
  #wakeSleep: (() => void) | null = null;
  readonly #waiters = new Set<() => void>();
  /** Where the next stream goes: the given addresses and those the control plane told. */
  readonly #addresses: ControlPlaneAddresses;
  /** Reconnects asked for by the control plane in a row, each followed at once. */
  #toldToGo = 0;

  constructor(o: RunAgentOptions) {
    if (o.serverUrls.length === 0)
      throw new RangeError('runAgent: serverUrls must name at least one control-plane address');
    this.#o = o;
    this.#addresses = new ControlPlaneAddresses(o.serverUrls);
    this.#log = o.logger;
    this.#backoff = new Backoff(o.backoff);
    this.#runner = new AttemptRunner({
      logger: o.logger,
      agentId: o.agentId,
      attemptsDir: path.join(o.stateDir, 'attempts'),
      killGraceMs: o.killGraceMs ?? 10_000,
      logFlushMs: o.logFlushMs ?? 100,
      ...(o.logBatcher ? { logBatcher: o.logBatcher } : {}),
      wake: () => this.#session?.pump(),
      changed: () => this.#changed(),
    });
  }

  get connected(): boolean {
    return this.#session?.welcomed ?? false;
  }

  get held(): number {
    return this.#runner.size;
  }

  async run(): Promise<AgentExit> {
    const log = this.#log;
    const addresses = this.#addresses;
    log.info(
      {
        servers: this.#o.serverUrls,
        incarnation: fingerprint(this.#o.incarnationId ?? PROCESS_INCARNATION_ID),
        slots: this.#o.slots ?? 1,
        labels: this.#o.labels ?? {},
        onlyTiId: this.#o.onlyTiId ?? undefined,
      },
      'agent starting',
    );
    try {
      // Before any Hello: what an earlier process of this agent left is held again or proved dead.
      await this.#runner.holdLeftovers();
      while (this.#exit === null) {
        const serverUrl = addresses.current();
        const client = createAgentServiceClient({
          serverUrl,
          http2KeepaliveMs: this.#o.http2KeepaliveMs ?? 10_000,
          tls: this.#o.tls ?? null,
        });
        const session = new ControlPlaneSession({
          client,
          logger: log,
          welcomeTimeoutMs: this.#o.welcomeTimeoutMs ?? 10_000,
          defaultKeepaliveMs: this.#o.defaultKeepaliveMs ?? 5_000,
          peer: {
            outbox: this.#runner.outbox,
            hello: () => this.#hello(),
            welcomed: (w) => {
              this.#backoff.bound(w.maxReconnectBackoff ? (positiveMs(w.maxReconnectBackoff) ?? undefined) : undefined);
              const { resumed, superseded } = this.#runner.welcome(w);
              addresses.learn(w.replicaUrls);
              const maxBackoffMs = this.#backoff.maxMs;
              log.info(
                { replica: w.replicaId, server: serverUrl, replicas: w.replicaUrls, resumed, superseded, maxBackoffMs },
                'connected',
              );
            },
            received: (m) => this.#received(m),
            acked: (seq) => this.#runner.acked(seq),
            held: () => this.#runner.refs(),
            beforeWrite: () => this.#runner.flushLogs(),
          },
        });
        this.#session = session;
        const end = await session.run();
        this.#session = null;
        client.close();
        // Whatever the stream did not confirm is written again on the next one.
        this.#runner.outbox.rewind();
        if (end.kind === 'fatal') throw new AgentFatalError(end.code, end.message);
        if (this.#exit !== null) break;
        // Any replica serves agents. Told to go: where the control plane said; else the next
        // address, so one that is gone costs a single try.
        if (!(end.reconnect && addresses.goTo(end.goTo))) addresses.advance();
        if (end.welcomed && end.durationMs >= this.#backoff.maxMs) {
          this.#backoff.reset();
          this.#toldToGo = 0;
        }
        // Told to go (the replica is shutting down): at once, elsewhere, with what it holds. Once
        // per address in a row at most: a replica that says so again at once gets the backoff.
        if (end.reconnect && this.#toldToGo < addresses.size) {
          this.#toldToGo++;
          log.info(
            { reason: end.reason, to: addresses.current(), held: this.#runner.size },
            'the control plane asked for a reconnect: reconnecting now',
          );
          continue;
        }
        const delayMs = this.#backoff.next();
        log.warn(
          { reason: end.reason, delayMs, to: addresses.current(), held: this.#runner.size },
          'stream ended: reconnecting',
        );
        await this.#sleep(delayMs);
      }
    } catch (err) {
      if (err instanceof AgentFatalError) {
        log.fatal({ code: err.code, held: this.#runner.size }, err.message);
        // Nothing can be reported any more: stop the tasks; the heartbeat reaper retries them.
        this.#runner.stopAll('the control plane refused the agent');
      }
      throw err;
    } finally {
      await this.#runner.close();
    }
    const exit = this.#exit!;
    log.info(exit, 'agent stopped');
    return exit;
  }

  stop(mode: ShutdownMode): Promise<void> {
    if (this.#stopping === null) {
      this.#stopping = this.#shutdown(mode);
    } else if (mode === 'handback') {
      // A second, harsher request: stop what still runs now (the waits below then end early).
      this.#handback();
    }
    return this.#stopping;
  }

  kill(): void {
    this.#runner.killAll();
    this.#end({ reason: 'killed', unacknowledged: this.#runner.size });
    this.#session?.close('killed', 'cancel');
  }

  async #shutdown(mode: ShutdownMode): Promise<void> {
    const graceMs = this.#o.shutdownGraceMs ?? 30_000;
    this.#log.info({ mode, held: this.#runner.size, graceMs }, 'shutting down');
    if (mode === 'finish') {
      await this.#waitFor(() => this.#runner.size === 0, graceMs);
    }
    if (this.#exit === null && this.#runner.size > 0) {
      this.#handback();
      const waitMs = mode === 'handback' ? graceMs : this.#runner.longestKillGraceMs() + (this.#o.ackWaitMs ?? 5_000);
      await this.#waitFor(() => this.#runner.size === 0, waitMs);
    }
    const unacknowledged = this.#runner.size;
    if (unacknowledged > 0)
      this.#log.warn(
        { unacknowledged },
        'exiting with unacknowledged attempts: the control plane will retry them after its heartbeat threshold',
      );
    this.#end({ reason: 'stopped', unacknowledged });
  }

  #handback(): void {
    const reason = `agent ${this.#o.agentId} shut down before the task ended`;
    this.#runner.refuseNew('the agent is shutting down');
    const n = this.#runner.stopAll(reason);
    if (n > 0)
      this.#log.info(
        { stopped: n },
        'stopping running attempts: they are reported failed and retried under their retry policy',
      );
  }

  #hello(): Hello {
    return create(HelloSchema, {
      protocolVersion: ProtocolVersion.PROTOCOL_VERSION_2,
      agentId: this.#o.agentId,
      labels: this.#o.labels ?? {},
      // The protocol features this agent implements, announced beside the operator's capabilities.
      capabilities: [...new Set([...(this.#o.capabilities ?? []), AGENT_FEATURES.secretEnv])],
      slots: this.#o.slots ?? 1,
      token: this.#o.token ?? '',
      held: this.#runner.refs(),
      onlyTiId: this.#o.onlyTiId ?? '0',
      onlyAttemptToken: this.#o.onlyAttemptToken ?? '',
      incarnationId: this.#o.incarnationId ?? PROCESS_INCARNATION_ID,
    });
  }

  #received(msg: ConnectResponse): void {
    switch (msg.msg.case) {
      case 'assign':
        this.#assigned = true;
        if (this.#drained)
          this.#log.warn({ tiId: msg.msg.value.attempt?.tiId }, 'Assign while drained (no undrain came): running it');
        if (this.#runner.runningCount >= (this.#o.slots ?? 1))
          this.#log.warn({ slots: this.#o.slots ?? 1 }, 'Assign beyond the slots this agent offered: running it');
        this.#drained = false;
        this.#runner.assign(msg.msg.value);
        return;
      case 'cancel':
        this.#runner.cancel(msg.msg.value);
        return;
      case 'drain':
        if (msg.msg.value.undrain) {
          this.#drained = false;
          this.#log.info({ reason: msg.msg.value.reason }, 'undrained: new work may come again');
          return;
        }
        this.#drained = true;
        this.#log.info(
          { reason: msg.msg.value.reason, held: this.#runner.size },
          'drained: no new work will come; finishing what is held',
        );
        this.#changed();
        return;
      case 'logAck':
        this.#runner.logAcked(msg.msg.value);
        return;
      case 'finishedAck':
        this.#runner.finishedAck(msg.msg.value);
        return;
    }
  }

  /** Re-checks every wait, and whether a one-shot agent is done. */
  #changed(): void {
    for (const check of [...this.#waiters]) check();
    if (this.#o.onlyTiId && this.#runner.size === 0 && (this.#assigned || this.#drained) && this.#stopping === null) {
      this.#end({ reason: 'completed', unacknowledged: 0 });
    }
  }

  /** Ends the run: closes the stream politely and stops reconnecting. */
  #end(exit: AgentExit): void {
    if (this.#exit !== null) return;
    this.#exit = exit;
    this.#session?.close(exit.reason, 'end');
    this.#wakeSleep?.();
    for (const check of [...this.#waiters]) check();
  }

  /** Resolves when `pred` holds, the agent is ending, or `ms` passed. */
  #waitFor(pred: () => boolean, ms: number): Promise<void> {
    return new Promise((resolve) => {
      const check = () => {
        if (!pred() && this.#exit === null) return;
        clearTimeout(timer);
        this.#waiters.delete(check);
        resolve();
      };
      const timer = setTimeout(() => {
        this.#waiters.delete(check);
        resolve();
      }, ms);
      this.#waiters.add(check);
      check();
    });
  }

  #sleep(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.#wakeSleep = null;
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.#wakeSleep = done;
    });
  }
}
