// What one agent stream needs from outside it: the store operations its reports are written
// through and the replica's settings and callbacks. Passed in, so a stream is driven without a
// database in tests, and kept apart from the stream's own logic.
import type { Logger } from 'pino';
import type { AttemptInputs } from '../../core/task-inputs.js';
import type { Attempt, AttemptResult, LogStream } from '../../core/attempt.js';
import type { StoredLogCounts } from '../../db/logs.js';
import type { AgentRegistry } from './agent-registry.js';
import type { AgentCredentials } from '../auth/agent-credential.js';
import type { HeartbeatBuffer, HeldRef } from './heartbeat-buffer.js';

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
    tokenId: string | null;
  }): Promise<{ draining: boolean } | null>;
  /** The agent rows an API token holds when this agent id would be one more past `max`; else null. */
  agentsOfTokenPast(tokenId: string, agentId: string, max: number): Promise<number | null>;
  /** `goodbye`: the agent ended the stream itself, untold (a clean stop). */
  disconnectAgent(agentId: string, sessionId: string, goodbye?: boolean): Promise<void>;
  /** The attempt tokens, of these, that are still current for this agent; each is now this process's. */
  currentAttempts(agentId: string, incarnationId: string, refs: HeldRef[]): Promise<Set<string>>;
  /**
   * Ends, as lost, the attempts of this agent that an earlier process of it was given and this
   * one does not hold (call after `currentAttempts`): they are retried with a new token.
   */
  endAbandoned(agentId: string, incarnationId: string): Promise<AbandonedAttempt[]>;
  /** How much of each attempt's log is stored (for attempts an agent re-attached to). */
  logsSoFar(refs: HeldRef[]): Promise<Map<string, StoredLogCounts>>;
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
  /**
   * Why this agent may not claim this task instance for itself (`--once --ti`, no attempt token),
   * naming the rule; null when the leader would have placed it there (core/one-shot-claim.ts).
   */
  oneShotRefusal(
    tiId: string,
    agent: { agentId: string; labels: Record<string, string>; capabilities: string[] },
  ): Promise<string | null>;
  /** Claims a one-shot agent's task instance for it (`--once --ti`). */
  claimOnly(tiId: string, agentId: string): Promise<Attempt | null>;
  /**
   * The attempt of this TI with this token, taken by this agent if no other agent has it and it
   * is still queued or running: what a pod started for one attempt runs. Never claims.
   */
  takeAttempt(tiId: string, attemptToken: string, agentId: string): Promise<Attempt | null>;
  /** An attempt's inputs: its upstreams' outputs in its run (db/attempts/attempt-inputs.ts). */
  inputs(attempt: Attempt): Promise<AttemptInputs>;
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
  /** Sent in each Assign, and each Finished's output checked against it: `--max-output-size`. */
  maxOutputBytes: number;
  /** A Finished of a superseded attempt came with an output: refused, not stored. */
  onOutputRejected(): void;
  /** Sent in Welcome: the longest reconnect delay agents should use (see fleet.ts). */
  maxReconnectBackoffMs: number;
  /** Sent in Welcome: how long an attempt may go without a heartbeat before it is lost. */
  heartbeatThresholdMs: number;
  /** True once this replica is shutting down: a new agent stream is refused (UNAVAILABLE). */
  leaving(): boolean;
  /** Sent in Welcome: where agents reach each live replica, this one first (db/replica-addresses.ts). */
  replicaUrls(): Promise<string[]>;
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
