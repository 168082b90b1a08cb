import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { DagValidationError, PRIORITY_RANGE } from '../../src/core/dag-spec.js';
import { MAX_DAG_SOURCE_BYTES } from '../../src/core/dag/check-dag-source-size.js';
import { MAX_INT4 } from '../../src/core/dag/field-readers.js';
import { parseDag } from '../../src/core/dag/parse-dag.js';
import { MAX_TIMEOUT_MS } from '../../src/core/dag/read-task.js';
import { MAX_DAG_TASKS } from '../../src/core/dag/read-tasks.js';
import { LIMITS } from '../../src/core/limits.js';
import { SETTINGS } from '../../src/server/config/settings.js';
import { ROOT } from '../helpers/leoflow-process.js';

/**
 * The reference pages against the code they describe: every key the DAG parser accepts is in
 * docs/dag-reference.md and every key there is one it accepts; every limit its table states is
 * the one the code enforces (tried on the parser where the limit lives in a pattern); every server
 * setting is in docs/operations.md's flag table, with the editions' defaults.
 */

function page(file: string): string {
  return readFileSync(path.join(ROOT, file), 'utf8');
}

/** The rows (cells, trimmed) of the Markdown table after `<!-- marker -->`. */
function tableAfter(text: string, marker: string): string[][] {
  const lines = text.split('\n');
  const at = lines.findIndex((l) => l.trim() === `<!-- ${marker} -->`);
  expect(at, `marker <!-- ${marker} --> in the page`).toBeGreaterThanOrEqual(0);
  let i = at + 1;
  while (i < lines.length && !lines[i]!.startsWith('|')) i++;
  const rows: string[][] = [];
  for (i += 2; i < lines.length && lines[i]!.startsWith('|'); i++) {
    rows.push(
      lines[i]!.split('|')
        .slice(1, -1)
        .map((c) => c.trim()),
    );
  }
  return rows;
}

/** The backticked names in a table's first column. */
function firstColumn(rows: string[][]): string[] {
  return rows.map((r) => /^`([^`]+)`/.exec(r[0]!)?.[1] ?? r[0]!);
}

function issuesOf(source: string): { path: string; message: string }[] {
  try {
    parseDag(source, 'x.yaml');
  } catch (err) {
    if (err instanceof DagValidationError) return err.issues;
    throw err;
  }
  return [];
}

/** The allowed keys the parser names when it meets an unknown key at `at` (a YAML fragment). */
function allowedKeys(source: string): string[] {
  const hit = issuesOf(source).find((i) => i.message.includes('allowed keys: '));
  expect(hit, `an unknown-key error for\n${source}`).toBeDefined();
  return hit!.message.split('allowed keys: ')[1]!.split(', ');
}

const task = (extra: string) => `dag_id: d\ntasks:\n  - id: a\n    command: x\n${extra}`;

/** Where each reference table's keys come from: a file with an unknown key at that level. */
const KEY_PROBES: Record<string, string> = {
  dag: 'dag_id: d\ntasks: [{ id: a, command: x }]\nzz: 1\n',
  trigger: 'dag_id: d\ntasks: [{ id: a, command: x }]\ntriggers: [{ event: e, zz: 1 }]\n',
  notify: 'dag_id: d\ntasks: [{ id: a, command: x }]\nnotify: [{ on: [failed], to: r, zz: 1 }]\n',
  task: task('    zz: 1\n'),
  wait: 'dag_id: d\ntasks: [{ id: a, wait: { event: e, timeout: 1h, zz: 1 } }]\n',
  approval: 'dag_id: d\ntasks: [{ id: a, approval: { timeout: 1h, zz: 1 } }]\n',
  placement: task('    executor: agents\n    placement: { zz: 1 }\n'),
  map: task('    map: { over: a.items, zz: 1 }\n'),
  kubernetes: task('    kubernetes: { zz: 1 }\n'),
  resources: task('    kubernetes: { resources: { zz: {} } }\n'),
  toleration: task('    kubernetes: { tolerations: [{ zz: 1 }] }\n'),
  'env-entry': task('    env: { A: { zz: 1 } }\n'),
  secret: task('    env: { A: { secret: { zz: 1 } } }\n'),
  'secret-kubernetes': task('    executor: kubernetes\n    env: { A: { secret: { kubernetes: { zz: 1 } } } }\n'),
};

describe('docs/dag-reference.md against the DAG parser', () => {
  const text = page('docs/dag-reference.md');

  it.each(Object.keys(KEY_PROBES))('the %s keys are exactly the ones the parser accepts', (level) => {
    const documented = firstColumn(tableAfter(text, `keys: ${level}`));
    expect([...documented].sort()).toEqual([...allowedKeys(KEY_PROBES[level]!)].sort());
  });

  it('has no keys table the test does not check', () => {
    const markers = [...text.matchAll(/<!-- keys: (\S+) -->/g)].map((m) => m[1]);
    expect(markers.sort()).toEqual(Object.keys(KEY_PROBES).sort());
  });

  /** A limit as the table writes it: "10,000 tasks", "1 MiB", "24 days" → a number. */
  function valueOf(cell: string): number {
    const m = /^(-?[\d,]+)\s*(KiB|MiB|days)?/.exec(cell);
    expect(m, `a number in "${cell}"`).not.toBeNull();
    const n = Number(m![1]!.replace(/,/g, ''));
    return m![2] === 'KiB' ? n * 1024 : m![2] === 'MiB' ? n * 1024 * 1024 : m![2] === 'days' ? n * 86_400_000 : n;
  }

  const accepted = (source: string) => issuesOf(source).length === 0;
  const idOf = (n: number) => 'a'.repeat(n);

  /** Each limit: the code's value, and where it lives in a pattern, a probe on the parser at value and value + 1. */
  const CODE: Record<string, { value: number; probe?: (n: number) => string }> = {
    dag_id: { value: 100, probe: (n) => `dag_id: ${idOf(n)}\ntasks: [{ id: a, command: x }]\n` },
    'task.id': { value: 100, probe: (n) => `dag_id: d\ntasks: [{ id: ${idOf(n)}, command: x }]\n` },
    tasks: { value: MAX_DAG_TASKS },
    file: { value: MAX_DAG_SOURCE_BYTES },
    retries: { value: 100, probe: (n) => task(`    retries: ${n}\n`) },
    priority: { value: PRIORITY_RANGE.max, probe: (n) => task(`    priority: ${n}\n`) },
    timeout: { value: MAX_TIMEOUT_MS, probe: (ms) => task(`    timeout: ${ms}ms\n`) },
    max_active_runs: {
      value: MAX_INT4,
      probe: (n) => `dag_id: d\nmax_active_runs: ${n}\ntasks: [{ id: a, command: x }]\n`,
    },
    errors: { value: LIMITS.dagErrors },
    'api.id': { value: LIMITS.idChars },
    'api.string': { value: LIMITS.stringChars },
    'api.message': { value: LIMITS.requestBytes },
    conf: { value: LIMITS.confBytes },
    'conf.depth': { value: LIMITS.confDepth },
    'agent.labels': { value: LIMITS.labels },
    'log.line': { value: LIMITS.logLineChars },
    'log.entries': { value: LIMITS.logEntries },
    'log.lines': { value: LIMITS.attemptLogLines },
  };

  it('states every limit as the code enforces it, and no other', () => {
    const rows = tableAfter(text, 'limits');
    const documented = Object.fromEntries(rows.map((r) => [firstColumn([r])[0]!, valueOf(r[1]!)]));
    expect(Object.keys(documented).sort()).toEqual(Object.keys(CODE).sort());
    for (const [name, { value, probe }] of Object.entries(CODE)) {
      expect(documented[name], `the limit ${name}`).toBe(value);
      if (probe) {
        expect(accepted(probe(value)), `${name} at ${value} is accepted`).toBe(true);
        expect(accepted(probe(value + 1)), `${name} at ${value + 1} is refused`).toBe(false);
      }
    }
    expect(LIMITS.capabilities).toBe(LIMITS.labels);
  });
});

describe('docs/operations.md against the server settings', () => {
  const rows = tableAfter(page('docs/operations.md'), 'settings');
  const editions = {
    lite: JSON.parse(page('editions/lite/config.json')) as Record<string, unknown>,
    pro: JSON.parse(page('editions/pro/config.json')) as Record<string, unknown>,
  };

  it('lists every setting once, with its flag and environment variable', () => {
    const documented = rows.map((r) => [firstColumn([r])[0], /`([^`]+)`/.exec(r[1]!)?.[1]]);
    const settings = Object.values(SETTINGS).map((s) => [s.flag, s.env]);
    expect(documented.sort()).toEqual(settings.sort());
  });

  it("gives each edition's default as its config file does", () => {
    const byFlag = new Map(rows.map((r) => [firstColumn([r])[0]!, r]));
    for (const [key, s] of Object.entries(SETTINGS)) {
      const row = byFlag.get(s.flag)!;
      for (const [col, edition] of [
        [2, 'lite'],
        [3, 'pro'],
      ] as const) {
        const value = editions[edition][key];
        if (value === undefined) continue;
        const shown = Array.isArray(value) ? value.join(',') : String(value);
        expect(row[col]!.replace(/`/g, '').split(/[\s(]/)[0], `${s.flag} in ${edition}`).toBe(shown);
      }
    }
  });
});

describe('links between the pages', () => {
  /** GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens. */
  const slug = (heading: string) =>
    heading
      .toLowerCase()
      .replace(/[^\p{L}\p{N} _-]/gu, '')
      .replace(/ /g, '-');
  const pages = [
    'README.md',
    'BENCHMARKS.md',
    ...['guide', 'dag-reference', 'operations', 'protocol', 'internals', 'architecture'].map((p) => `docs/${p}.md`),
  ];

  it.each(pages)('every relative link of %s reaches a file, and a heading when it names one', (file) => {
    const text = page(file);
    for (const [, target] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      if (/^[a-z]+:/.test(target!)) continue;
      const [rel, anchor] = target!.split('#');
      const dest = rel ? path.join(path.dirname(file), rel) : file;
      expect(() => page(dest), `${file}: link to ${target}`).not.toThrow();
      if (anchor && dest.endsWith('.md')) {
        const headings = [...page(dest).matchAll(/^#+ (.+)$/gm)].map((m) => slug(m[1]!));
        expect(headings, `${file}: link to ${target}`).toContain(anchor);
      }
    }
  });
});

describe("docs/operations.md's list of RPCs", () => {
  it('names every RPC of every service in proto/, under its service', () => {
    const text = page('docs/operations.md');
    const api = text.slice(text.indexOf('## The API'), text.indexOf('## Tokens and roles'));
    const protoDir = path.join(ROOT, 'proto/leoflow/v1');
    for (const file of ['agent', 'cluster', 'token', 'workflow']) {
      const proto = page(path.relative(ROOT, path.join(protoDir, `${file}.proto`)));
      const service = /^service (\w+)/m.exec(proto)![1]!;
      const listed = new RegExp(`\`${service}\` \\(([^)]*)\\)`).exec(api.replace(/\s+/g, ' '));
      expect(listed, `${service} in "The API"`).not.toBeNull();
      const names = [...listed![1]!.matchAll(/`(\w+)`/g)].map((m) => m[1]);
      expect(names.sort(), service).toEqual([...proto.matchAll(/^\s+rpc (\w+)/gm)].map((m) => m[1]).sort());
    }
  });
});
