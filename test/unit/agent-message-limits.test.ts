import { create } from '@bufbuild/protobuf';
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { LIMITS } from '../../src/core/limits.js';
import { ConnectRequestSchema, HelloSchema } from '../../src/gen/leoflow/v1/agent_pb.js';
import { parseReport, validateHelloFields } from '../../src/server/agents/validate-agent-message.js';

/** An agent's labels, capabilities and output, each at its limit and one past it. */

const hello = (o: { labels?: Record<string, string>; capabilities?: string[] }) =>
  create(HelloSchema, {
    agentId: 'a1',
    incarnationId: randomUUID(),
    slots: 1,
    labels: o.labels ?? {},
    capabilities: o.capabilities ?? [],
  });
const labelsOf = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, 'v']));
const attempt = { tiId: '1', tryNumber: 1, attemptToken: randomUUID() };
const log = (entries: { seq: number; stream: string; line: string }[]) =>
  create(ConnectRequestSchema, { msg: { case: 'log', value: { attempt, entries } } });

describe('agent message limits', () => {
  it(`takes ${LIMITS.labels} labels and refuses one more`, () => {
    expect(() => validateHelloFields(hello({ labels: labelsOf(LIMITS.labels) }))).not.toThrow();
    expect(() => validateHelloFields(hello({ labels: labelsOf(LIMITS.labels + 1) }))).toThrow(
      `hello.labels: must be at most ${LIMITS.labels}, got "${LIMITS.labels + 1} labels"`,
    );
  });

  it(`takes a label value of ${LIMITS.labelValueChars} characters and refuses a longer one, or one with a NUL`, () => {
    expect(() => validateHelloFields(hello({ labels: { gpu: 'v'.repeat(LIMITS.labelValueChars) } }))).not.toThrow();
    expect(() => validateHelloFields(hello({ labels: { gpu: 'v'.repeat(LIMITS.labelValueChars + 1) } }))).toThrow(
      `hello.labels["gpu"]: must be at most ${LIMITS.labelValueChars} characters`,
    );
    expect(() => validateHelloFields(hello({ labels: { gpu: 'a\0b' } }))).toThrow(
      'hello.labels["gpu"]: must not contain NUL characters',
    );
    expect(() => validateHelloFields(hello({ labels: { ['k'.repeat(LIMITS.labelKeyChars + 1)]: 'v' } }))).toThrow(
      `hello.labels key: must be at most ${LIMITS.labelKeyChars} characters`,
    );
  });

  it(`takes ${LIMITS.capabilities} capabilities of ${LIMITS.capabilityChars} characters, and refuses more or longer`, () => {
    expect(() =>
      validateHelloFields(
        hello({
          capabilities: Array.from({ length: LIMITS.capabilities }, (_, i) =>
            `c${i}`.padEnd(LIMITS.capabilityChars, 'x'),
          ),
        }),
      ),
    ).not.toThrow();
    expect(() =>
      validateHelloFields(hello({ capabilities: Array.from({ length: LIMITS.capabilities + 1 }, (_, i) => `c${i}`) })),
    ).toThrow(`hello.capabilities: must be at most ${LIMITS.capabilities}`);
    expect(() => validateHelloFields(hello({ capabilities: ['x'.repeat(LIMITS.capabilityChars + 1)] }))).toThrow(
      `hello.capabilities[0]: must be at most ${LIMITS.capabilityChars} characters`,
    );
  });

  it(`takes ${LIMITS.logEntries} entries in one Log and refuses one more`, () => {
    const entries = (n: number) => Array.from({ length: n }, (_, i) => ({ seq: i + 1, stream: 'stdout', line: 'x' }));
    expect(parseReport(log(entries(LIMITS.logEntries)))).toMatchObject({ type: 'log' });
    expect(() => parseReport(log(entries(LIMITS.logEntries + 1)))).toThrow(
      `log.entries: must be at most ${LIMITS.logEntries} a message`,
    );
  });

  it(`stores a line of ${LIMITS.logLineChars} characters whole, cuts a longer one with a marker, and replaces what Postgres cannot store`, () => {
    const at = parseReport(log([{ seq: 1, stream: 'stdout', line: 'x'.repeat(LIMITS.logLineChars) }]));
    expect(at.type === 'log' && at.entries[0]!.line).toBe('x'.repeat(LIMITS.logLineChars));
    const past = parseReport(log([{ seq: 1, stream: 'stdout', line: 'x'.repeat(1024 * 1024) }]));
    expect(past.type === 'log' && past.entries[0]!.line).toBe(
      `${'x'.repeat(LIMITS.logLineChars)}… [line cut: ${1024 * 1024 - LIMITS.logLineChars} more characters]`,
    );
    const odd = parseReport(log([{ seq: 1, stream: 'stdout', line: 'a\0b\uD800c' }]));
    expect(odd.type === 'log' && odd.entries[0]!.line).toBe('a\uFFFDb\uFFFDc');
  });

  it('refuses a log entry whose stream is not stdout, stderr or system, naming the field and the allowed values', () => {
    for (const stream of ['stdout', 'stderr', 'system'])
      expect(parseReport(log([{ seq: 1, stream, line: 'x' }]))).toMatchObject({ entries: [{ stream }] });
    for (const stream of ['', 'STDOUT', 'debug'])
      expect(() =>
        parseReport(
          log([
            { seq: 1, stream: 'stdout', line: 'x' },
            { seq: 2, stream, line: 'x' },
          ]),
        ),
      ).toThrow(`log.entries[1].stream: must be one of stdout, stderr, system, got ${JSON.stringify(stream)}`);
  });
});
