/**
 * Translation between the wire (Assign, AttemptRef, Finished) and the executor's attempts and
 * results. Pure.
 */

import { create } from '@bufbuild/protobuf';
import { timestampFromMs, type Duration } from '@bufbuild/protobuf/wkt';
import type { Attempt, AttemptResult } from '../core/attempt.js';
import { secretEnvFromWire, type SecretSource } from '../core/secret-ref.js';
import {
  AttemptOutcome,
  AttemptRefSchema,
  FinishedSchema,
  type Assign,
  type AttemptRef,
  type Finished,
} from '../gen/leoflow/v1/agent_pb.js';

/** Identity of one attempt: the same ti, try and token mean the same attempt. */
export function attemptKey(ref: { tiId: string; tryNumber: number; attemptToken: string }): string {
  return `${ref.tiId}/${ref.tryNumber}/${ref.attemptToken}`;
}

export function refOf(attempt: Attempt): AttemptRef {
  return create(AttemptRefSchema, {
    tiId: attempt.tiId,
    tryNumber: attempt.tryNumber,
    attemptToken: attempt.attemptToken,
  });
}

/** The attempt an Assign asks for. Throws when the Assign does not name one. */
export function attemptFromAssign(assign: Assign): Attempt {
  const ref = assign.attempt;
  if (!ref || ref.tiId === '0' || ref.tiId === '' || ref.attemptToken === '') {
    throw new Error('Assign without an attempt (ti_id, try_number, attempt_token)');
  }
  return {
    tiId: ref.tiId,
    runId: assign.runId,
    dagId: assign.dagId,
    taskId: assign.taskId,
    tryNumber: ref.tryNumber,
    maxTries: assign.maxTries,
    attemptToken: ref.attemptToken,
    dispatchKey: `${assign.dagId}-${assign.runId}-${assign.taskId}-${ref.tryNumber}`,
    command: [...assign.command],
    // The trace context is in env already; its own fields win only where env lacks it.
    env: { ...traceEnv(assign), ...assign.env },
    ...(assign.traceparent
      ? { trace: { traceparent: assign.traceparent, tracestate: assign.tracestate || null } }
      : {}),
    ...withSecretEnv(secretEnvFromWire(assign.secretEnv)),
    cwd: assign.cwd === '' ? null : assign.cwd,
    timeoutMs: assign.timeout ? positiveMs(assign.timeout) : null,
    // The control plane's grace, when it sends one: it fails the attempt that outlives it.
    killGraceMs: assign.killGrace ? durationMs(assign.killGrace) : undefined,
    ...inputsOf(assign),
    ...(assign.outputMaxBytes > 0 ? { outputMaxBytes: assign.outputMaxBytes } : {}),
    ...(assign.outputRequired ? { outputRequired: true } : {}),
  };
}

/** The inputs the control plane read for it (the variables of `inputs:` are in env already). */
function inputsOf(a: Assign): Pick<Attempt, 'inputs'> {
  if (a.inputsError !== '') return { inputs: { error: a.inputsError } };
  return a.inputsJson !== '' ? { inputs: { json: a.inputsJson, env: {} } } : {};
}

function traceEnv(a: Assign): Record<string, string> {
  if (!a.traceparent) return {};
  return { TRACEPARENT: a.traceparent, ...(a.tracestate ? { TRACESTATE: a.tracestate } : {}) };
}

function withSecretEnv(refs: Record<string, SecretSource> | undefined): { secretEnv?: Record<string, SecretSource> } {
  return refs === undefined ? {} : { secretEnv: refs };
}

const OUTCOMES: Record<AttemptResult['outcome'], AttemptOutcome> = {
  success: AttemptOutcome.SUCCESS,
  failed: AttemptOutcome.FAILED,
  timed_out: AttemptOutcome.TIMED_OUT,
  cancelled: AttemptOutcome.CANCELLED,
  spawn_failed: AttemptOutcome.SPAWN_FAILED,
  // The agent's executor never decides this on its own (its heartbeat keeps every attempt);
  // should it happen, the attempt was stopped, which is what CANCELLED says.
  superseded: AttemptOutcome.CANCELLED,
};

/** The Finished report of an attempt's result. */
export function finishedOf(attempt: Attempt, result: AttemptResult): Finished {
  return create(FinishedSchema, {
    attempt: refOf(attempt),
    outcome: OUTCOMES[result.outcome],
    exitCode: result.exitCode ?? undefined,
    signal: result.signal ?? '',
    error: result.error ?? '',
    // When it ended, read from its shim after a restart, or now: held through an outage, the
    // report still says when the process ended.
    endedAt: timestampFromMs(Math.round(result.endedAt ?? Date.now())),
    ...(result.output !== undefined ? { output: result.output } : {}),
  });
}

/** A Duration in whole milliseconds; a negative one is 0. */
export function durationMs(d: Duration): number {
  return Math.max(0, Number(d.seconds) * 1000 + Math.floor(d.nanos / 1_000_000));
}

/** A Duration in whole milliseconds; null for zero or negative (no timeout). */
export function positiveMs(d: Duration): number | null {
  const ms = durationMs(d);
  return ms > 0 ? ms : null;
}
