import { create } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import {
  MAX_AGENT_CAPABILITIES, MAX_AGENT_LABELS, MAX_CAPABILITY_CHARS, MAX_LABEL_KEY_CHARS, MAX_LABEL_VALUE_CHARS, MAX_LOG_ENTRIES_PER_MESSAGE, MAX_LOG_LINE_CHARS,
} from '../../src/core/limits.js';
import { ConnectRequestSchema, HelloSchema } from '../../src/gen/leoflow/v1/agent_pb.js';
import { parseReport, validateHelloFields } from '../../src/server/validate-agent-message.js';

/** Issue 25: an agent's Hello and Log bounded in counts and sizes, each at the limit and past it. */

const hello = (o: { labels?: Record<string, string>; capabilities?: string[] }) =>
  create(HelloSchema, { agentId: 'a1', incarnationId: '0b6f8a3e-1c2d-4e5f-8a9b-0c1d2e3f4a5b', slots: 1, ...o });

const labelsOf = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, 'v']));

describe('Hello labels and capabilities', () => {
  it('takes the most labels and refuses one more', () => {
    expect(() => validateHelloFields(hello({ labels: labelsOf(MAX_AGENT_LABELS) }))).not.toThrow();
    expect(() => validateHelloFields(hello({ labels: labelsOf(MAX_AGENT_LABELS + 1) }))).toThrow(`hello.labels: must have at most ${MAX_AGENT_LABELS} labels, got "${MAX_AGENT_LABELS + 1} labels"`);
  });

  it('takes the longest label key and value and refuses longer', () => {
    expect(() => validateHelloFields(hello({ labels: { ['k'.repeat(MAX_LABEL_KEY_CHARS)]: 'v'.repeat(MAX_LABEL_VALUE_CHARS) } }))).not.toThrow();
    expect(() => validateHelloFields(hello({ labels: { ['k'.repeat(MAX_LABEL_KEY_CHARS + 1)]: 'v' } }))).toThrow(`hello.labels key: must be at most ${MAX_LABEL_KEY_CHARS} characters`);
    // A 1 MB label value made `agents list` print 44 MB.
    expect(() => validateHelloFields(hello({ labels: { gpu: 'v'.repeat(1_000_000) } }))).toThrow(`hello.labels["gpu"]: must be at most ${MAX_LABEL_VALUE_CHARS} characters, got "1000000 characters"`);
  });

  it('takes the most capabilities of the longest size and refuses more or longer', () => {
    const caps = Array.from({ length: MAX_AGENT_CAPABILITIES }, (_, i) => `${i}`.padEnd(MAX_CAPABILITY_CHARS, 'c'));
    expect(() => validateHelloFields(hello({ capabilities: caps }))).not.toThrow();
    expect(() => validateHelloFields(hello({ capabilities: [...caps, 'x'] }))).toThrow(`hello.capabilities: must have at most ${MAX_AGENT_CAPABILITIES} capabilities`);
    expect(() => validateHelloFields(hello({ capabilities: ['c'.repeat(MAX_CAPABILITY_CHARS + 1)] }))).toThrow(`hello.capabilities[0]: must be at most ${MAX_CAPABILITY_CHARS} characters`);
  });

  it('refuses NUL, lone surrogates and empty names', () => {
    expect(() => validateHelloFields(hello({ labels: { gpu: 'a\0b' } }))).toThrow('hello.labels["gpu"]: must not contain NUL characters');
    expect(() => validateHelloFields(hello({ capabilities: ['\ud800'] }))).toThrow('hello.capabilities[0]: must be valid Unicode (no lone surrogate)');
    expect(() => validateHelloFields(hello({ capabilities: [''] }))).toThrow('hello.capabilities[0]: must not be empty');
  });
});

const attempt = { tiId: '7', tryNumber: 1, attemptToken: '0b6f8a3e-1c2d-4e5f-8a9b-0c1d2e3f4a5b' };
const log = (entries: { seq: number; stream: string; line: string }[]) => create(ConnectRequestSchema, { msg: { case: 'log', value: { attempt, entries } } });
const lines = (n: number) => Array.from({ length: n }, (_, i) => ({ seq: i + 1, stream: 'stdout', line: `line ${i}` }));

describe('Log messages', () => {
  it('takes the most entries in one Log and refuses one more', () => {
    const ok = parseReport(log(lines(MAX_LOG_ENTRIES_PER_MESSAGE)));
    expect(ok.type === 'log' && ok.entries.length).toBe(MAX_LOG_ENTRIES_PER_MESSAGE);
    expect(() => parseReport(log(lines(MAX_LOG_ENTRIES_PER_MESSAGE + 1)))).toThrow(`log.entries: must have at most ${MAX_LOG_ENTRIES_PER_MESSAGE} entries per Log message`);
    expect(() => parseReport(log(lines(10_000)))).toThrow(/got "10000 entries"/);
  });

  it('keeps a line at the limit whole and cuts a longer one, with a marker saying how much', () => {
    const r = parseReport(log([{ seq: 1, stream: 'stdout', line: 'a'.repeat(MAX_LOG_LINE_CHARS) }, { seq: 2, stream: 'stderr', line: 'b'.repeat(1_000_000) }]));
    if (r.type !== 'log') throw new Error('expected a log report');
    expect(r.entries[0]!.line).toBe('a'.repeat(MAX_LOG_LINE_CHARS));
    expect(r.entries[1]!.line.startsWith('b'.repeat(MAX_LOG_LINE_CHARS))).toBe(true);
    expect(r.entries[1]!.line.slice(MAX_LOG_LINE_CHARS)).toBe(` … [line truncated by leoflow: ${1_000_000 - MAX_LOG_LINE_CHARS} more characters]`);
  });
});
