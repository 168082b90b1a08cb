import { LIMITS } from './limits.js';
import type { MapSpec } from './map-spec.js';
/**
 * The validated, normalized form of a DAG file. This is what `dags.spec` stores (jsonb) and what
 * each run snapshots at trigger time, so a DAG applied mid-run never changes a run in flight.
 * Durations are milliseconds; optional fields are filled with their defaults by the parser.
 */
import type { SecretSource } from './secret-ref.js';
import type { PodTemplate } from './pod-template.js';
import type { EventMatch } from './event-match.js';
import type { NotifyRule } from './notify-rule.js';

export const TRIGGER_RULES = ['all_success', 'all_done', 'one_success', 'one_failed', 'none_failed'] as const;
export type TriggerRule = (typeof TRIGGER_RULES)[number];

export const EXECUTOR_KINDS = ['default', 'subprocess', 'kubernetes', 'agents'] as const;
export type ExecutorKind = (typeof EXECUTOR_KINDS)[number];

/** Where a task may run when its executor is `agents` (standalone agent fleet). */
export interface PlacementSpec {
  /** Required agent labels (all must match). */
  labels: Record<string, string>;
  /** Required agent capabilities (all must be present). */
  capabilities: string[];
  /** If non-empty, only these agent ids. */
  allowedAgents: string[];
  forbiddenAgents: string[];
  /** Concurrent attempts of this task on one agent; null for no limit. */
  maxParallelPerAgent: number | null;
}

/** A pod toleration, as the Kubernetes API spells it (fields absent when not given). */
export interface TolerationSpec {
  key?: string;
  operator?: 'Exists' | 'Equal';
  value?: string;
  effect?: 'NoSchedule' | 'PreferNoSchedule' | 'NoExecute';
  tolerationSeconds?: number;
}

/**
 * A task's `kubernetes:` block: what its pods differ in from the edition's defaults. Only the
 * fields the file gives are present.
 */
export interface KubernetesSpec {
  image?: string;
  /** Resource name → quantity (`cpu: "500m"`, `memory: 4Gi`), as strings. */
  resources?: { requests?: Record<string, string>; limits?: Record<string, string> };
  namespace?: string;
  serviceAccount?: string;
  nodeSelector?: Record<string, string>;
  tolerations?: TolerationSpec[];
  /** A partial Pod laid over the server's `--pod-template` (core/pod-template.ts), as Kubernetes spells it. */
  podTemplate?: PodTemplate;
}

export interface TaskDefinition {
  id: string;
  /** argv; the first element is the program. Never run through a shell unless the user asks. */
  command: string[];
  dependsOn: string[];
  triggerRule: TriggerRule;
  /** Extra attempts after the first; max tries = retries + 1. */
  retries: number;
  /** Delay before the first retry; doubles each try, capped at maxRetryDelayMs. */
  retryDelayMs: number;
  maxRetryDelayMs: number;
  /** Execution timeout of one attempt; null for none. */
  timeoutMs: number | null;
  /** The task is due to end this long after its first scheduling (`deadline:`); absent: never. */
  deadlineMs?: number;
  env: Record<string, string>;
  /** Variables whose values are secrets: where the executor reads each, never the value. Absent
   *  when there are none (so an unchanged file keeps its hash and version). */
  secretEnv?: Record<string, SecretSource>;
  /** Working directory of the command; null for the control plane's own. */
  cwd: string | null;
  /** 'default' means the edition's executor. */
  executor: ExecutorKind;
  /** Container image, used by the kubernetes executor. */
  image: string | null;
  /** null when the task has no placement constraints. */
  placement: PlacementSpec | null;
  /** The pod of each attempt, for the kubernetes executor; absent when the file has no `kubernetes:`
   *  block (so an unchanged file keeps its hash and version). */
  kubernetes?: KubernetesSpec;
  /** Higher first among the work waiting to start; absent: the DAG's (`taskPriority`). */
  priority?: number;
  /** `output: required`: an attempt that writes no output to LEOFLOW_OUTPUT fails. Absent: optional. */
  output?: 'required';
  /** Environment variables set from upstreams' outputs: name → `upstream.path.in.output`. Absent: none. */
  inputs?: Record<string, string>;
  /** `cache:`: a successful attempt's result is reused by a later one with the same key. Absent: none. */
  cache?: CacheSpec;
  /** A task that waits for an event instead of running a command (its `command` is empty). */
  wait?: WaitSpec;
  /** A task that waits for a person's approval instead of running a command (its `command` is empty). */
  approval?: ApprovalSpec;
  /** `map:`: one mapped instance (`id[i]`) per item of a list in an upstream's output. Absent: none. */
  map?: MapSpec;
}

/**
 * `cache: { key: [conf.date, inputs.extract.path], ttl: 7d }`: the key is the list of values at
 * these references (cache-key.ts); a success within `ttl` with the same DAG, task spec and key is
 * reused instead of running the task again.
 */
export interface CacheSpec {
  /** References `conf[.path]` or `inputs.<upstream>[.path]`, in order. */
  key: string[];
  ttlMs: number;
}

/** The outcomes a wait or an approval may take at its timeout. */
export const ON_TIMEOUT = ['failed', 'skipped', 'success'] as const;
export type OnTimeout = (typeof ON_TIMEOUT)[number];

/**
 * `wait:`: the task ends when an event of this name whose payload matches arrives (SendEvent, a
 * webhook), holding nothing meanwhile. A match value `$conf.PATH` is the run's conf at PATH, read
 * when the wait starts.
 */
export interface WaitSpec {
  event: string;
  match?: EventMatch;
  timeoutMs: number;
  /** An event received this long before the wait started counts too; absent: only later ones. */
  lookBackMs?: number;
  onTimeout: OnTimeout;
}

/** The roles an approval may ask for: a viewer never approves. */
export const APPROVAL_ROLES = ['operator', 'admin'] as const;
export type ApprovalRole = (typeof APPROVAL_ROLES)[number];

/** `approval:`: the task ends when a token of `role` or above approves (success) or rejects (failed) it. */
export interface ApprovalSpec {
  role: ApprovalRole;
  timeoutMs: number;
  message?: string;
  onTimeout: OnTimeout;
}

export interface DagSpec {
  dagId: string;
  description: string;
  /** Cron expression (5 or 6 fields) or null for manual runs only. */
  schedule: string | null;
  /** IANA time zone the schedule is read in. */
  timezone: string;
  /** true: create every missed run since startDate. */
  catchup: boolean;
  /** ISO-8601 instant; null means "from when the DAG was first applied". */
  startDate: string | null;
  maxActiveRuns: number;
  /** Orders this DAG's queued runs and tasks among others' within fairness; absent: 0. */
  priority?: number;
  tags: string[];
  /** The events that start a run of it; absent when none (so an unchanged file keeps its hash). */
  triggers?: TriggerSpec[];
  /** Whom to tell when a run ends; absent: the server's defaults (`[]`: nobody). */
  notify?: NotifyRule[];
  /** A run is due to end this long after its logical date (scheduled) or its trigger; absent: never. */
  deadlineMs?: number;
  tasks: TaskDefinition[];
}

/** An event that starts a run, its payload the run's conf, when `match` holds on the payload. */
export interface TriggerSpec {
  event: string;
  match?: EventMatch;
}

/** Priorities range over these, both ends included. */
export const PRIORITY_RANGE = { min: -1000, max: 1000 } as const;

/** A task's priority: its own, else its DAG's, else 0 (absent from specs that set none, so an
 *  unchanged file keeps its hash and version). */
export function taskPriority(dag: Pick<DagSpec, 'priority'>, task: Pick<TaskDefinition, 'priority'>): number {
  return task.priority ?? dag.priority ?? 0;
}

/** One problem found in a DAG file. `path` is the field's path, e.g. `tasks[2].retry_delay`. */
export interface DagIssue {
  path: string;
  message: string;
}

/** Thrown when a DAG file is invalid; `issues` lists every problem found, in file order. */
export class DagValidationError extends Error {
  override readonly name = 'DagValidationError';
  constructor(
    readonly file: string,
    readonly issues: DagIssue[],
  ) {
    // The first issues in full, then a count: a file with thousands of bad tasks must still give
    // an error small enough to travel (it goes back in an HTTP/2 header).
    const line = (i: DagIssue) => `${i.path || '(root)'}: ${i.message}`;
    const cut = (t: string) => (t.length > LIMITS.dagErrorChars ? `${t.slice(0, LIMITS.dagErrorChars)}…` : t);
    const shown = issues.slice(0, LIMITS.dagErrors).map((i) => `  ${file}: ${cut(line(i))}`);
    const more = issues.length > LIMITS.dagErrors ? `\n  … and ${issues.length - LIMITS.dagErrors} more` : '';
    super(`${file}: invalid DAG:\n` + shown.join('\n') + more);
  }
}
