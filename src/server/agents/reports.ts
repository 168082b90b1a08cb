// An agent's reports on its stream (Keepalive, Started, Log, Finished), each checked and then
// written or refused, with its answer sent back. Its own file: what each report does is read
// apart from how the stream is opened and closed (connection.ts).
import type { MessageInitShape } from '@bufbuild/protobuf';
import { Code, ConnectError } from '@connectrpc/connect';
import type { Logger } from 'pino';
import type { AttemptResult } from '../../core/attempt.js';
import { checkOutput } from '../../core/task-output.js';
import { ConnectResponseSchema, type ConnectRequest } from '../../gen/leoflow/v1/agent_pb.js';
import type { AgentConnectionDeps, AgentMessageKind } from './connection-deps.js';
import type { AsyncQueue } from './async-queue.js';
import type { HeartbeatSource, HeldRef } from './heartbeat-buffer.js';
import type { StreamAttempts } from './held-attempts.js';
import { AgentMessageError, parseReport } from './validate-agent-message.js';

type Response = MessageInitShape<typeof ConnectResponseSchema>;

/** The kind of a message, for counting a refusal (an empty one counts with Hello: the protocol's own). */
function kindOf(req: ConnectRequest): AgentMessageKind {
  const c = req.msg.case;
  return c === 'started' || c === 'log' || c === 'finished' || c === 'keepalive' ? c : 'hello';
}

/**
 * Checks a message by `check`: one that breaks a rule is counted, logged in one line, and ends
 * this stream (and no other) with INVALID_ARGUMENT naming the field and the rule.
 */
export function validMessage<T>(
  kind: AgentMessageKind,
  check: () => T,
  onRejected: AgentConnectionDeps['onRejected'],
  log: Logger,
): T {
  try {
    return check();
  } catch (err) {
    if (!(err instanceof AgentMessageError)) throw err;
    onRejected(kind, 'invalid');
    log.warn({ report: kind, field: err.field, rule: err.rule }, `agent message refused: ${err.message}`);
    throw new ConnectError(err.message, Code.InvalidArgument);
  }
}

/**
 * The reports of one welcomed agent stream. Every report is checked whole before it joins a write
 * shared with other agents; one that breaks the rules ends this stream alone with
 * INVALID_ARGUMENT, except a Finished whose end is inconsistent: that one is refused alone (its
 * attempt failed), so the stream's others go on.
 */
export class AgentReports {
  constructor(
    private readonly s: {
      deps: AgentConnectionDeps;
      attempts: StreamAttempts;
      out: AsyncQueue<Response>;
      log: Logger;
      agentId: string;
      /** A keepalive arrived: the stream is not deaf. */
      onKeepalive(): void;
    },
  ) {}

  /** A report being written: if the store gives up on it (the database stayed unreachable), the
   *  stream is closed, and the agent reconnects and sends it again. */
  #track(write: Promise<void>): void {
    write.catch((err: unknown) => {
      this.s.log.error({ err }, 'could not record an agent report; closing the stream');
      this.s.out.close(new ConnectError(`agent report not recorded: ${(err as Error).message}`, Code.Unavailable));
    });
  }

  /** Attempts a keepalive listed that the store found superseded: each zombie is told to stop. */
  superseded(refs: HeldRef[]): void {
    const { attempts } = this.s;
    for (const r of refs) {
      // Ended (and acknowledged) since the keepalive that listed it, or cancelled and stopping
      // (its Finished is awaited): not a zombie.
      const held = attempts.held.get(r.tiId);
      if (
        !held ||
        held.attemptToken !== r.attemptToken ||
        attempts.cancelled.has(r.attemptToken) ||
        attempts.finishing.has(r.attemptToken)
      )
        continue;
      this.s.deps.onRejected('keepalive', 'stale');
      this.s.log.warn({ tiId: r.tiId, try: r.tryNumber }, 'agent holds a superseded attempt: cancelling it');
      this.s.out.push({
        msg: { case: 'cancel', value: { attempt: r, reason: 'attempt superseded (declared lost or cancelled)' } },
      });
    }
  }

  /** Records an attempt's end and answers FinishedAck; `refused` names the rule a report broke. */
  #finish(r: HeldRef, result: AttemptResult, refused: string): void {
    const { deps, attempts, agentId } = this.s;
    attempts.logSeq.delete(r.attemptToken);
    attempts.finishing.add(r.attemptToken);
    deps.onFinishing(agentId, r.attemptToken);
    this.#track(
      deps.store.finished(r, result).then(({ outcome, runId }) => {
        if (outcome === 'refused' && refused === '') {
          deps.onRejected('finished', 'stale');
          if (result.output !== undefined) deps.onOutputRejected();
        }
        if (attempts.held.get(r.tiId)?.attemptToken === r.attemptToken) attempts.held.delete(r.tiId);
        attempts.cancelled.delete(r.attemptToken);
        attempts.finishing.delete(r.attemptToken);
        this.s.out.push({
          msg: {
            case: 'finishedAck',
            value: { attempt: r, applied: outcome === 'applied' && refused === '', refused },
          },
        });
        deps.onFinished(agentId, runId, r.attemptToken);
      }),
    );
  }

  /**
   * A Finished's output checked again here (the agent checks it first): one too big for this
   * server's limit or not JSON is not stored, and a success that sent it fails, saying why.
   */
  #checkedOutput(r: HeldRef, result: AttemptResult): AttemptResult {
    if (result.output === undefined) return result;
    const { output, ...rest } = result;
    const rule = {
      taskId: '',
      subject: `attempt (ti ${r.tiId}, try ${r.tryNumber})`,
      required: false,
      maxBytes: this.s.deps.maxOutputBytes,
    };
    const bytes = Buffer.from(output, 'utf8');
    const checked = checkOutput(rule, bytes, bytes.length);
    if (checked.ok) return checked.json === null ? rest : { ...rest, output: checked.json };
    this.s.log.warn({ tiId: r.tiId, try: r.tryNumber }, checked.error);
    return rest.outcome === 'success' ? { ...rest, outcome: 'failed', error: checked.error } : rest;
  }

  async handle(req: ConnectRequest, source: HeartbeatSource): Promise<void> {
    const { deps, attempts, out, log, agentId } = this.s;
    const { store } = deps;
    const report = validMessage(kindOf(req), () => parseReport(req), deps.onRejected, log);
    switch (report.type) {
      case 'keepalive': {
        this.s.onKeepalive();
        deps.heartbeats.note(source, report.held);
        out.push({ msg: { case: 'keepaliveAck', value: { seq: report.seq } } });
        return;
      }
      case 'started': {
        const r = report.ref;
        attempts.held.set(r.tiId, r);
        // Not awaited: the replica's report batcher writes this with every other report waiting,
        // in order (an attempt's Started before its Finished), while this loop reads on.
        this.#track(
          store.started(r, report.pid, agentId).then((ok) => {
            if (ok) return;
            deps.onRejected('started', 'stale');
            out.push({ msg: { case: 'cancel', value: { attempt: r, reason: 'attempt superseded' } } });
          }),
        );
        return;
      }
      case 'log': {
        const r = report.ref;
        let last = attempts.logSeq.get(r.attemptToken);
        if (last === undefined) {
          // Not assigned to nor resumed on this stream, or after its Finished: nothing to store.
          deps.onRejected('log', 'stale');
          log.warn(
            { tiId: r.tiId, try: r.tryNumber },
            'Log for an attempt this stream does not hold (or after its Finished): not stored',
          );
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
        attempts.logSeq.set(r.attemptToken, last);
        const lastSeq = last;
        this.#track(
          store.logsWritten().then(() => void out.push({ msg: { case: 'logAck', value: { attempt: r, lastSeq } } })),
        );
        return;
      }
      case 'invalid-finished': {
        // Refused alone: its attempt is ended as failed (so it is retried, not left running with
        // no one reporting it), and the stream's other attempts go on.
        const r = report.ref;
        deps.onRejected('finished', 'invalid');
        log.warn(
          { report: 'finished', field: report.error.field, rule: report.error.rule },
          `agent message refused: ${report.error.message}`,
        );
        const result: AttemptResult = {
          outcome: 'failed',
          exitCode: null,
          signal: null,
          error: `the agent's Finished was invalid: ${report.error.message}`,
        };
        this.#finish(r, result, report.error.message);
        return;
      }
      case 'finished':
        this.#finish(report.ref, this.#checkedOutput(report.ref, report.result), '');
        return;
    }
  }
}
