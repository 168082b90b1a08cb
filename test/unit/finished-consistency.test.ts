import { create } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { AttemptOutcome, ConnectRequestSchema } from '../../src/gen/leoflow/v1/agent_pb.js';
import { parseReport } from '../../src/server/agents/validate-agent-message.js';

const attempt = { tiId: '7', tryNumber: 1, attemptToken: '6f1c1f8e-3a57-4c1b-9d0e-2a7f5b1c9e11' };

function finished(outcome: number, exitCode?: number, signal = '', error = '') {
  return parseReport(
    create(ConnectRequestSchema, { msg: { case: 'finished', value: { attempt, outcome, exitCode, signal, error } } }),
  );
}

/** Finished's outcome, exit code and signal must agree (agent.proto, message Finished). */
describe('Finished consistency', () => {
  it.each([
    ['SUCCESS, exit 0', AttemptOutcome.SUCCESS, 0, ''],
    ['SUCCESS, no exit code', AttemptOutcome.SUCCESS, undefined, ''],
    ['FAILED, exit 3', AttemptOutcome.FAILED, 3, ''],
    ['FAILED, SIGKILL', AttemptOutcome.FAILED, undefined, 'SIGKILL'],
    ['FAILED before a process ran', AttemptOutcome.FAILED, undefined, ''],
    ['TIMED_OUT, SIGTERM', AttemptOutcome.TIMED_OUT, undefined, 'SIGTERM'],
    ['CANCELLED, exit 143', AttemptOutcome.CANCELLED, 143, ''],
    ['SPAWN_FAILED', AttemptOutcome.SPAWN_FAILED, undefined, ''],
  ])('accepts %s', (_name, outcome, code, signal) => {
    expect(finished(outcome, code, signal).type).toBe('finished');
  });

  it('accepts FAILED with exit 0 when its error says why (an output that broke a rule)', () => {
    const r = finished(AttemptOutcome.FAILED, 0, '', 'task "t" wrote no output (its DAG says output: required)');
    expect(r.type).toBe('finished');
  });

  it('accepts an output on a Finished and hands it on as sent (the stream checks it)', () => {
    const r = parseReport(
      create(ConnectRequestSchema, {
        msg: { case: 'finished', value: { attempt, outcome: AttemptOutcome.SUCCESS, exitCode: 0, output: '{"a":1}' } },
      }),
    );
    expect(r.type === 'finished' && r.result.output).toBe('{"a":1}');
  });

  it.each([
    [
      'outcome 0',
      0,
      0,
      '',
      /^finished\.outcome: must be one of SUCCESS, FAILED, TIMED_OUT, CANCELLED, SPAWN_FAILED, got 0$/,
    ],
    ['outcome 99', 99, 0, '', /^finished\.outcome: .* got 99$/],
    [
      'SUCCESS with a signal',
      AttemptOutcome.SUCCESS,
      undefined,
      'SIGKILL',
      /^finished\.signal: must be empty for outcome SUCCESS/,
    ],
    [
      'SUCCESS with exit 1',
      AttemptOutcome.SUCCESS,
      1,
      '',
      /^finished\.exit_code: must be 0 \(or unset\) for outcome SUCCESS, got 1$/,
    ],
    ['FAILED with exit 0', AttemptOutcome.FAILED, 0, '', /^finished\.exit_code: must not be 0 for outcome FAILED/],
    [
      'an exit code and a signal',
      AttemptOutcome.CANCELLED,
      143,
      'SIGTERM',
      /^finished\.exit_code: must be unset when a signal is set/,
    ],
    ['exit code 256', AttemptOutcome.FAILED, 256, '', /^finished\.exit_code: must be between 0 and 255, got 256$/],
    ['exit code -1', AttemptOutcome.FAILED, -1, '', /^finished\.exit_code: must be between 0 and 255/],
    [
      'SPAWN_FAILED with an exit code',
      AttemptOutcome.SPAWN_FAILED,
      127,
      '',
      /^finished\.exit_code: must be unset for outcome SPAWN_FAILED/,
    ],
  ])('refuses %s alone, naming the field and the rule', (_name, outcome, code, signal, message) => {
    const r = finished(outcome, code, signal);
    expect(r.type).toBe('invalid-finished');
    if (r.type !== 'invalid-finished') return;
    expect(r.ref).toEqual(attempt);
    expect(r.error.message).toMatch(message);
  });

  it('a bad attempt ref still ends the stream (it names no attempt to refuse alone)', () => {
    expect(() =>
      parseReport(
        create(ConnectRequestSchema, {
          msg: {
            case: 'finished',
            value: { attempt: { ...attempt, attemptToken: 'x' }, outcome: 99 as AttemptOutcome },
          },
        }),
      ),
    ).toThrow(/finished\.attempt\.attempt_token: must be a UUID/);
  });
});
