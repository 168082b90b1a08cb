/** parseDag on a document that is not a DAG: YAML and size errors, unknown and missing keys. */
import { describe, expect, it } from 'vitest';

import { MAX_DAG_SOURCE_BYTES } from '../../src/core/dag/check-dag-source-size.js';
import { parseDag } from '../../src/core/dag/parse-dag.js';
import { DAG_KEYS, FILE, PLACEMENT_KEYS, TASK_KEYS, dag, issuesOf, tasks } from '../helpers/dag-sources.js';

describe('parseDag: document-level errors', () => {
  it('reports a YAML syntax error with its line and column, and nothing else', () => {
    expect(issuesOf('dag_id: t\ntasks: [a, b\nfoo: 1\n')).toEqual([
      {
        path: '',
        message:
          'invalid YAML: Flow sequence in block collection must be sufficiently indented and end with a ] at line 3, column 1',
      },
    ]);
  });

  it('reports a duplicate key with its line', () => {
    expect(issuesOf('dag_id: t\ntasks: []\ndag_id: u\n')).toEqual([
      { path: '', message: 'invalid YAML: Map keys must be unique at line 3, column 1' },
    ]);
  });

  it('reports a tab used as indentation', () => {
    expect(issuesOf('dag_id: t\ntasks:\n\t- id: a\n')[0]?.message).toMatch(/^invalid YAML: .* at line 3, column 1$/);
  });

  it('rejects an alias bomb fast', () => {
    const bomb = [
      'a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]',
      ...'bcdefghi'.split('').map((k, i) => {
        const prev = 'abcdefghi'[i] as string;
        return `${k}: &${k} [${Array(9).fill(`*${prev}`).join(', ')}]`;
      }),
    ].join('\n');
    const started = performance.now();
    expect(issuesOf(bomb)).toEqual([
      {
        path: '',
        message: 'invalid YAML: too many alias expansions (limit 100); the document looks like an alias bomb',
      },
    ]);
    expect(performance.now() - started).toBeLessThan(1_000);
  });

  it('reports an alias to an undefined anchor', () => {
    expect(issuesOf('dag_id: *nope\ntasks: []\n')).toEqual([
      { path: '', message: 'invalid YAML: Unresolved alias (the anchor must be set before the alias): nope' },
    ]);
  });

  it('reports tags other than the core ones', () => {
    expect(issuesOf('dag_id: !custom t\nstart_date: !!timestamp 2024-01-01\ntasks: []\n')).toEqual([
      { path: '', message: 'invalid YAML: Unresolved tag: !custom at line 1, column 9' },
      { path: '', message: 'invalid YAML: Unresolved tag: tag:yaml.org,2002:timestamp at line 2, column 13' },
    ]);
  });

  it('rejects more than one document', () => {
    expect(issuesOf(`${dag()}---\n${dag()}`)[0]?.message).toMatch(
      /^invalid YAML: Source contains multiple documents; .* at line \d+, column 1$/,
    );
  });

  it('rejects a mapping key that is not a scalar', () => {
    expect(issuesOf('? [a, b]\n: 1\n')[0]?.message).toBe(
      'invalid YAML: With stringKeys, all keys must be strings at line 1, column 3',
    );
  });

  it.each([
    ['- a\n- b\n', 'a list'],
    ['just a string\n', '"just a string"'],
    ['42\n', '42'],
  ])('rejects a document that is not a mapping: %j', (source, got) => {
    expect(issuesOf(source)).toEqual([
      { path: '', message: `expected the document to be a mapping with at least dag_id and tasks, got ${got}` },
    ]);
  });

  it.each(['', '\n\n', '# only a comment\n'])('says an empty file is empty: %j', (source) => {
    expect(issuesOf(source)).toEqual([
      { path: '', message: 'the file is empty; a DAG file needs at least dag_id and tasks' },
    ]);
  });

  it('rejects a source over 1 MiB before parsing it', () => {
    const padding = `# ${'x'.repeat(MAX_DAG_SOURCE_BYTES)}\n`;
    expect(issuesOf(dag() + padding)).toEqual([
      {
        path: '',
        message: `the DAG file is ${dag().length + padding.length} bytes; the limit is 1048576 bytes (1 MiB)`,
      },
    ]);
  });

  it('counts UTF-8 bytes, not characters, against the limit', () => {
    // 400,000 three-byte characters: under 1 Mi characters, over 1 MiB.
    const comment = `# ${'€'.repeat(400_000)}\n`;
    expect(issuesOf(dag() + comment)[0]?.message).toBe(
      `the DAG file is ${dag().length + 2 + 1_200_000 + 1} bytes; the limit is 1048576 bytes (1 MiB)`,
    );
    // Just under the limit in bytes parses.
    expect(parseDag(dag() + `# ${'€'.repeat(300_000)}\n`, FILE).dagId).toBe('t');
  });

  it('rejects more than 10,000 tasks', () => {
    const lines = Array.from({ length: 10_001 }, (_, i) => `{id: t${i}, command: x}`);
    expect(issuesOf(tasks(...lines))).toEqual([
      { path: 'tasks', message: 'too many tasks: 10001; the limit is 10000' },
    ]);
  });
});

describe('parseDag: unknown and missing keys', () => {
  it('names an unknown top-level key, suggests a close one and lists the allowed ones', () => {
    expect(issuesOf(dag('', 'schedul: "@daily"\nowner: me\n'))).toEqual([
      { path: 'schedul', message: `unknown key "schedul" (did you mean "schedule"?); allowed keys: ${DAG_KEYS}` },
      { path: 'owner', message: `unknown key "owner"; allowed keys: ${DAG_KEYS}` },
    ]);
  });

  it('names an unknown task key', () => {
    expect(issuesOf(dag('dependson: []\npool: x'))).toEqual([
      {
        path: 'tasks[0].dependson',
        message: `unknown key "dependson" (did you mean "depends_on"?); allowed keys: ${TASK_KEYS}`,
      },
      { path: 'tasks[0].pool', message: `unknown key "pool"; allowed keys: ${TASK_KEYS}` },
    ]);
  });

  it('names an unknown placement key', () => {
    expect(issuesOf(dag('placement: { label: {}, max_parallel: 2 }'))).toEqual([
      {
        path: 'tasks[0].placement.label',
        message: `unknown key "label" (did you mean "labels"?); allowed keys: ${PLACEMENT_KEYS}`,
      },
      {
        path: 'tasks[0].placement.max_parallel',
        message: `unknown key "max_parallel"; allowed keys: ${PLACEMENT_KEYS}`,
      },
    ]);
  });

  it('quotes a key that is not a plain name in the path', () => {
    expect(issuesOf(dag('', '"weird key": 1\n'))).toEqual([
      { path: '["weird key"]', message: `unknown key "weird key"; allowed keys: ${DAG_KEYS}` },
    ]);
  });

  it('reports missing required keys', () => {
    expect(issuesOf('description: nothing else\n')).toEqual([
      { path: 'dag_id', message: 'missing required key "dag_id"' },
      { path: 'tasks', message: 'missing required key "tasks"' },
    ]);
    expect(issuesOf(tasks('{retries: 1}'))).toEqual([
      { path: 'tasks[0].id', message: 'missing required key "id"' },
      { path: 'tasks[0].command', message: 'missing required key "command"' },
    ]);
  });
});
