import { describe, expect, it } from 'vitest';
import { parseDag } from '../../src/core/dag/parse-dag.js';
import { eventMatches } from '../../src/core/event-match.js';
import { issuesOf } from '../helpers/dag-sources.js';

const dag = (triggers: string) => `dag_id: d\ntriggers: ${triggers}\ntasks: [{ id: a, command: x }]\n`;

describe("a DAG's triggers", () => {
  it('are read with their match, and left out of the spec when there are none', () => {
    expect(parseDag(dag('[{ event: file.landed, match: { a.b: [1, 2], c: null } }]'), 'd.yaml').triggers).toEqual([
      { event: 'file.landed', match: { 'a.b': [1, 2], c: null } },
    ]);
    expect('triggers' in parseDag(dag('[]'), 'd.yaml')).toBe(false);
  });

  it('are refused with the field at fault', () => {
    expect(issuesOf(dag('[{ match: {} }]'))).toEqual([
      { path: 'triggers[0].event', message: expect.stringMatching(/required|missing/) },
    ]);
    expect(issuesOf(dag('[{ event: "has space" }]'))[0]).toMatchObject({
      path: 'triggers[0].event',
      message: expect.stringMatching(/^an event name is 1-200 characters/),
    });
    expect(issuesOf(dag('[{ event: e, match: { a: { b: 1 } } }]'))[0]).toMatchObject({
      path: 'triggers[0].match.a',
      message: expect.stringMatching(/^expected a string, number, boolean or null, or a non-empty list/),
    });
    expect(issuesOf(dag('[{ event: e, match: { "a..b": 1 } }]'))[0]).toMatchObject({
      path: expect.stringMatching(/^triggers\[0\]\.match/),
      message: expect.stringMatching(/^a payload path is names joined by dots/),
    });
    expect(issuesOf(dag(`[${Array.from({ length: 101 }, () => '{ event: e }').join(', ')}]`))[0]).toMatchObject({
      path: 'triggers',
      message: 'at most 100 triggers, got 101',
    });
  });
});

describe('eventMatches', () => {
  const payload = { bucket: 'raw', size: { unit: 'MB', n: 3 }, tags: ['x'], gone: null };
  it.each([
    [undefined, true],
    [{}, true],
    [{ bucket: 'raw' }, true],
    [{ bucket: 'RAW' }, false],
    [{ 'size.unit': ['KB', 'MB'] }, true],
    [{ 'size.n': 3 }, true],
    [{ 'size.n': '3' }, false],
    [{ gone: null }, true],
    [{ missing: null }, false],
    [{ 'bucket.deeper': 'raw' }, false],
    [{ tags: 'x' }, false],
    [{ bucket: 'raw', 'size.unit': 'GB' }, false],
  ])('%j on the payload: %s', (match, want) => {
    expect(eventMatches(match as never, payload)).toBe(want);
  });
});
