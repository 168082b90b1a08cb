/**
 * The rules an agent's messages must keep, checked before anything is written. A report joins
 * writes shared with every other agent of the replica (the heartbeat flush, the report batch), so
 * a value the database would refuse is refused here instead, to its sender alone: a bad client
 * harms only itself.
 */

import type { AttemptResult, LogStream } from '../../core/attempt.js';
import { replaceUnstorable, unstorable } from '../../core/check-text.js';
import { fingerprint } from '../../core/fingerprint.js';
import { LIMITS } from '../../core/limits.js';
import {
  AttemptOutcome,
  type AttemptRef,
  type ConnectRequest,
  type Finished,
  type Hello,
} from '../../gen/leoflow/v1/agent_pb.js';
import type { HeldRef } from './heartbeat-buffer.js';

/** A message that breaks a rule: `field` is its path in the message, `rule` what it must be. */
export class AgentMessageError extends Error {
  constructor(
    readonly field: string,
    readonly rule: string,
    got?: unknown,
  ) {
    super(got === undefined ? `${field}: ${rule}` : `${field}: ${rule}, got ${shown(got)}`);
    this.name = 'AgentMessageError';
  }
}

/** An agent's report after validation: what the connection applies. */
export type AgentReport =
  | { type: 'keepalive'; seq: bigint; held: HeldRef[] }
  | { type: 'started'; ref: HeldRef; pid: number }
  | { type: 'log'; ref: HeldRef; entries: { seq: number; stream: LogStream; line: string }[] }
  | { type: 'finished'; ref: HeldRef; result: AttemptResult }
  /** A Finished whose outcome, exit code and signal disagree: refused alone, not its stream. */
  | { type: 'invalid-finished'; ref: HeldRef; error: AgentMessageError };

const AGENT_ID = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const POSITIVE_INT64 = /^[1-9][0-9]{0,18}$/;
const INT64_MAX = 9223372036854775807n;
const SIGNAL = /^SIG[A-Z0-9+-]{1,16}$/;
const LOG_STREAMS: readonly LogStream[] = ['stdout', 'stderr', 'system'];
/** Longest Finished.error kept: a reason for a human, not a log. */
const MAX_ERROR_CHARS = 16_384;

const OUTCOMES = new Map<number, AttemptResult['outcome']>([
  [AttemptOutcome.SUCCESS, 'success'],
  [AttemptOutcome.FAILED, 'failed'],
  [AttemptOutcome.TIMED_OUT, 'timed_out'],
  [AttemptOutcome.CANCELLED, 'cancelled'],
  [AttemptOutcome.SPAWN_FAILED, 'spawn_failed'],
]);

/** The value as the error message shows it: quoted, and cut short. */
/** A credential in an error (returned to the agent, logged by the server): its fingerprint only. */
function secretShown(v: string): { fingerprint: string; length: number } {
  return { fingerprint: fingerprint(v), length: v.length };
}

function shown(v: unknown): string {
  const s = typeof v === 'bigint' ? v.toString() : (JSON.stringify(v) ?? String(v));
  return s.length > 80 ? `${s.slice(0, 80)}…` : s;
}

export function isUuid(s: string): boolean {
  return UUID.test(s);
}

/** An attempt named in a report: (ti_id, try_number, attempt_token), each checked. */
export function attemptRef(r: AttemptRef | undefined, field: string): HeldRef {
  if (!r) throw new AgentMessageError(field, 'an attempt (ti_id, try_number, attempt_token) is required');
  if (!POSITIVE_INT64.test(r.tiId) || BigInt(r.tiId) > INT64_MAX)
    throw new AgentMessageError(`${field}.ti_id`, 'must be a positive 64-bit integer', r.tiId);
  if (!Number.isInteger(r.tryNumber) || r.tryNumber < 1)
    throw new AgentMessageError(`${field}.try_number`, 'must be at least 1', r.tryNumber);
  if (!UUID.test(r.attemptToken))
    throw new AgentMessageError(
      `${field}.attempt_token`,
      'must be a UUID (the token of the Assign)',
      secretShown(r.attemptToken),
    );
  return { tiId: r.tiId, tryNumber: r.tryNumber, attemptToken: r.attemptToken };
}

/** A text that is stored: Postgres text cannot hold NUL. */
function storableText(s: string, field: string, maxChars: number): string {
  const bad = unstorable(s);
  if (bad) throw new AgentMessageError(field, bad, s);
  if (s.length > maxChars)
    throw new AgentMessageError(field, `must be at most ${maxChars} characters`, `${s.length} characters`);
  return s;
}

/** A Hello's fields other than the version and the token (checked by the connection first). */
export function validateHelloFields(h: Hello): HeldRef[] {
  if (!AGENT_ID.test(h.agentId)) {
    throw new AgentMessageError('hello.agent_id', "must be 1-128 letters, digits, '_', '.', ':' or '-'", h.agentId);
  }
  if (!UUID.test(h.incarnationId)) {
    throw new AgentMessageError(
      'hello.incarnation_id',
      'must be a UUID made once per agent process',
      secretShown(h.incarnationId),
    );
  }
  if (!Number.isInteger(h.slots) || h.slots < 1 || h.slots > 10_000)
    throw new AgentMessageError('hello.slots', 'must be between 1 and 10000', h.slots);
  if (h.onlyTiId !== '' && h.onlyTiId !== '0' && !POSITIVE_INT64.test(h.onlyTiId)) {
    throw new AgentMessageError('hello.only_ti_id', 'must be 0 or a positive 64-bit integer', h.onlyTiId);
  }
  if (h.onlyAttemptToken !== '') {
    if (h.onlyTiId === '' || h.onlyTiId === '0')
      throw new AgentMessageError('hello.only_attempt_token', 'only with only_ti_id', secretShown(h.onlyAttemptToken));
    if (!UUID.test(h.onlyAttemptToken))
      throw new AgentMessageError(
        'hello.only_attempt_token',
        'must be empty or an attempt token (a UUID)',
        secretShown(h.onlyAttemptToken),
      );
  }
  const labels = Object.entries(h.labels);
  if (labels.length > LIMITS.labels)
    throw new AgentMessageError('hello.labels', `must be at most ${LIMITS.labels}`, `${labels.length} labels`);
  for (const [k, v] of labels) {
    storableText(k, `hello.labels key`, LIMITS.labelKeyChars);
    if (k === '') throw new AgentMessageError('hello.labels', 'keys must not be empty');
    storableText(v, `hello.labels[${shown(k)}]`, LIMITS.labelValueChars);
  }
  if (h.capabilities.length > LIMITS.capabilities)
    throw new AgentMessageError(
      'hello.capabilities',
      `must be at most ${LIMITS.capabilities}`,
      `${h.capabilities.length} capabilities`,
    );
  h.capabilities.forEach((c, i) => storableText(c, `hello.capabilities[${i}]`, LIMITS.capabilityChars));
  return h.held.map((r, i) => attemptRef(r, `hello.held[${i}]`));
}

/**
 * A line of output as stored: unstorable characters replaced (output is never refused for its
 * bytes), and a line past LIMITS.logLineChars cut, with a marker saying how much was dropped.
 */
export function storableLine(line: string): string {
  let s = replaceUnstorable(line);
  if (s.length > LIMITS.logLineChars)
    s = `${s.slice(0, LIMITS.logLineChars)}… [line cut: ${s.length - LIMITS.logLineChars} more characters]`;
  return s;
}

/** The outcome, exit code and signal of a Finished, which must agree (see agent.proto's Finished). */
function checkEnd(f: Finished): AttemptResult['outcome'] {
  const outcome = OUTCOMES.get(f.outcome);
  if (!outcome)
    throw new AgentMessageError(
      'finished.outcome',
      `must be one of ${[...OUTCOMES.keys()].map((k) => AttemptOutcome[k]).join(', ')}`,
      f.outcome,
    );
  if (f.signal !== '' && !SIGNAL.test(f.signal))
    throw new AgentMessageError('finished.signal', "must be empty or a signal name such as 'SIGKILL'", f.signal);
  const code = f.exitCode;
  if (code !== undefined && (!Number.isInteger(code) || code < 0 || code > 255))
    throw new AgentMessageError('finished.exit_code', 'must be between 0 and 255', code);
  if (code !== undefined && f.signal !== '')
    throw new AgentMessageError(
      'finished.exit_code',
      'must be unset when a signal is set (a process exits or is killed, never both)',
      code,
    );
  switch (outcome) {
    case 'success':
      if (f.signal !== '')
        throw new AgentMessageError('finished.signal', 'must be empty for outcome SUCCESS', f.signal);
      if (code !== undefined && code !== 0)
        throw new AgentMessageError('finished.exit_code', 'must be 0 (or unset) for outcome SUCCESS', code);
      break;
    case 'failed':
      // Exit 0 fails only for a reason the error gives (its output broke a rule: task-output.ts).
      if (code === 0 && f.error === '')
        throw new AgentMessageError(
          'finished.exit_code',
          'must not be 0 for outcome FAILED (exit code 0 is SUCCESS) unless error says why',
          code,
        );
      break;
    case 'spawn_failed':
      if (code !== undefined)
        throw new AgentMessageError(
          'finished.exit_code',
          'must be unset for outcome SPAWN_FAILED (no process ran)',
          code,
        );
      if (f.signal !== '')
        throw new AgentMessageError(
          'finished.signal',
          'must be empty for outcome SPAWN_FAILED (no process ran)',
          f.signal,
        );
      break;
  }
  return outcome;
}

function finishedResult(f: Finished): AttemptResult {
  const outcome = checkEnd(f);
  const error = storableText(f.error, 'finished.error', MAX_ERROR_CHARS);
  const endedAt = endedAtMs(f);
  return {
    outcome,
    exitCode: f.exitCode ?? null,
    signal: (f.signal || null) as NodeJS.Signals | null,
    error: error || (outcome === 'failed' && f.exitCode !== undefined ? `exit code ${f.exitCode}` : null),
    ...(endedAt !== null ? { endedAt } : {}),
    ...(f.output !== undefined ? { output: f.output } : {}),
  };
}

/**
 * Finished.ended_at in ms, null when unset; one in the future is now. Any value is harmless: the
 * recorded end is kept between the attempt's recorded start and now (finish-attempt.ts).
 */
function endedAtMs(f: Finished): number | null {
  const t = f.endedAt;
  if (!t) return null;
  const ms = Number(t.seconds) * 1000 + Math.floor(t.nanos / 1_000_000);
  return Number.isFinite(ms) && ms > 0 ? Math.min(ms, Date.now()) : null;
}

/** An agent's message after its Hello, checked whole before any of it is applied. */
export function parseReport(req: ConnectRequest): AgentReport {
  switch (req.msg.case) {
    case 'keepalive':
      return {
        type: 'keepalive',
        seq: req.msg.value.seq,
        held: req.msg.value.held.map((r, i) => attemptRef(r, `keepalive.held[${i}]`)),
      };
    case 'started':
      return { type: 'started', ref: attemptRef(req.msg.value.attempt, 'started.attempt'), pid: req.msg.value.pid };
    case 'log': {
      const ref = attemptRef(req.msg.value.attempt, 'log.attempt');
      if (req.msg.value.entries.length > LIMITS.logEntries)
        throw new AgentMessageError(
          'log.entries',
          `must be at most ${LIMITS.logEntries} a message`,
          `${req.msg.value.entries.length} entries`,
        );
      const entries = req.msg.value.entries.map((e, i) => {
        if (!Number.isInteger(e.seq) || e.seq < 1)
          throw new AgentMessageError(`log.entries[${i}].seq`, 'must be at least 1', e.seq);
        // An unknown stream is refused rather than relabelled: the reader could not tell it apart.
        if (!LOG_STREAMS.includes(e.stream as LogStream))
          throw new AgentMessageError(`log.entries[${i}].stream`, `must be one of ${LOG_STREAMS.join(', ')}`, e.stream);
        return { seq: e.seq, stream: e.stream as LogStream, line: storableLine(e.line) };
      });
      return { type: 'log', ref, entries };
    }
    case 'finished': {
      const ref = attemptRef(req.msg.value.attempt, 'finished.attempt');
      try {
        return { type: 'finished', ref, result: finishedResult(req.msg.value) };
      } catch (err) {
        if (!(err instanceof AgentMessageError)) throw err;
        return { type: 'invalid-finished', ref, error: err };
      }
    }
    case 'hello':
      throw new AgentMessageError('hello', 'may only be sent once, first on the stream');
    default:
      throw new AgentMessageError('msg', 'must be one of started, log, finished, keepalive (got an empty message)');
  }
}
