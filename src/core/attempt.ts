/**
 * One attempt of one task instance, and the reports made about it. Types only: shared by the
 * executors (which run attempts) and the store (which records them) without either importing
 * the other.
 */

import type { KubernetesSpec } from './dag-spec.js';
import type { SecretSource } from './secret-ref.js';
import type { AttemptInputs } from './task-inputs.js';
import type { TraceContext } from './trace-context.js';

/** One attempt of one task instance, as claimed by the dispatcher. */
export interface Attempt {
  tiId: string;
  runId: string;
  dagId: string;
  taskId: string;
  tryNumber: number;
  maxTries: number;
  /** Random per attempt; every report carries it so a superseded attempt is fenced off. */
  attemptToken: string;
  /** Deterministic `<dag>-<run>-<task>-<try>`: a duplicate dispatch collapses onto it. */
  dispatchKey: string;
  command: string[];
  env: Record<string, string>;
  /**
   * Variables whose values the executor reads when it starts the process (secret-ref.ts): only the
   * references travel and are stored, never a value. Absent when the task has none.
   */
  secretEnv?: Record<string, SecretSource>;
  cwd: string | null;
  /** Execution timeout; null for none. */
  timeoutMs: number | null;
  /**
   * Time between SIGTERM and SIGKILL when it is stopped; absent: the executor's own. An agent
   * takes it from Assign.kill_grace: the control plane fails an attempt that outlives its timeout
   * by its own grace, so its grace is the one to keep.
   */
  killGraceMs?: number;
  /** The attempt's own trace context (a child of its run's span); absent for a run made before tracing. */
  trace?: TraceContext;
  /** The agent chosen for it, for the agents executor; absent otherwise. */
  agentId?: string;
  /** The task's image and `kubernetes:` block, for the kubernetes executor; absent when it has neither. */
  pod?: { image: string | null; kubernetes?: KubernetesSpec };
  /** Its task's upstream task ids, whose outputs are its inputs; absent when it has none. */
  upstreams?: string[];
  /** Its DAG's `inputs:` mapping (variable → `upstream.path`); absent when none. */
  inputEnv?: Record<string, string>;
  /**
   * For a mapped instance, the list it is one item of (its task's `map.over`): in its inputs that
   * list is its item, so an input costs an item, not the whole list. Absent for other attempts.
   */
  mapOver?: { upstream: string; path: string[] };
  /** Its trigger rule is `one_failed` (it runs because the run failed): it is told what failed. */
  failureSummary?: boolean;
  /**
   * Its upstreams' outputs (task-inputs.ts), read before its process starts: by the subprocess
   * executor through its reporter, or by the control plane for an agent (Assign). Absent: not read
   * yet, or it has no upstreams.
   */
  inputs?: AttemptInputs;
  /** Its DAG says `output: required`: an attempt that writes none fails. */
  outputRequired?: boolean;
  /** The size limit of its output (bytes); absent: the executor's own. */
  outputMaxBytes?: number;
  /** Its DAG's `cache:`, with the hash of its task's spec; absent: it is never cached. */
  cache?: AttemptCache;
}

/** What an attempt of a cached task looks its cache entry up by (cache-key.ts). */
export interface AttemptCache {
  key: string[];
  ttlMs: number;
  /** The task's spec, hashed: a change to the task makes its earlier results unusable. */
  specHash: string;
}

/** What identifies one attempt in every report about it. */
export interface AttemptKey {
  tiId: string;
  tryNumber: number;
  attemptToken: string;
}

/**
 * Where an attempt stands in the store: still queued (no agent has reported it started), running,
 * or over (ended a while ago, or another try or token holds its TI).
 */
export type AttemptStanding = 'queued' | 'running' | 'over';

export type LogStream = 'stdout' | 'stderr' | 'system';

/** How an attempt ended. */
export interface AttemptResult {
  /** The process's exit code, or null when it was killed by a signal or never started. */
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  /** Why it ended, for a human: 'exit code 3', 'timed out after 5000 ms', 'spawn ENOENT', … */
  error: string | null;
  outcome: 'success' | 'failed' | 'timed_out' | 'cancelled' | 'spawn_failed' | 'superseded';
  /**
   * When the process ended (epoch ms, by this process's clock), for an end reported later than it
   * happened: read from the shim's status file after a restart, or held while the control plane
   * was away. The store records it as the attempt's end. Absent: it ended as it is reported.
   */
  endedAt?: number;
  /**
   * The JSON its process wrote to LEOFLOW_OUTPUT, checked (task-output.ts); absent when it wrote
   * none. Stored with the end, by the statement that records it, so only a current attempt's lands.
   */
  output?: string;
}

/** Store operations an executor reports through. Every call is fenced by the attempt token. */
export interface AttemptReporter {
  /** Records that the attempt started. Resolves false if the attempt is no longer current. */
  started(attempt: Attempt, info: { pid: number | null }): Promise<boolean>;
  /** Buffers one log line (the implementation batches the writes). */
  log(attempt: Attempt, stream: LogStream, line: string): void;
  /**
   * Records a heartbeat for every live attempt in one write. Resolves the ti ids whose attempt
   * is still current and running; the executor stops any attempt not in the set.
   */
  heartbeat(attempts: Attempt[]): Promise<Set<string>>;
  /** Records the end of the attempt (after flushing its log lines). */
  finished(attempt: Attempt, result: AttemptResult): Promise<void>;
  /**
   * For an attempt re-attached after a restart: how many lines of each output its log holds
   * already (a re-attached tail starts after them), and the log numbers lines on from there.
   */
  logsSoFar(attempt: Attempt): Promise<{ stdout: number; stderr: number }>;
  /** Its upstreams' outputs, for an attempt whose `inputs` is not given; absent: it has none to read. */
  inputs?(attempt: Attempt): Promise<AttemptInputs>;
}
