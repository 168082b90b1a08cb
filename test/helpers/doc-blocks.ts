/**
 * The fenced blocks of a Markdown page, as the docs tests read them: each block's language, text
 * and the `<!-- docs-test: … -->` marker on the line just above its fence, and the `$ ` commands
 * of a `console` block with the output the page shows for each. Also how a documented output is
 * compared with a real one: digits, durations and generated suffixes vary from run to run, the
 * words and the shape of each line do not.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { ROOT } from './leoflow-process.js';

export interface DocBlock {
  file: string;
  /** 1-based line of the opening fence. */
  line: number;
  lang: string;
  text: string;
  /**
   * From `<!-- docs-test: … -->` above the fence: `skip` (not run), `loose` (first and last lines
   * only), `retry` (a read repeated until it matches), `exit=N`, `file=NAME` (written for the
   * commands), `columns=N` (only each line's first N fields: a table that may gain columns),
   * `contains` (each shown line is within a real one: lines that may gain a prefix).
   */
  marks: {
    skip: boolean;
    loose: boolean;
    retry: boolean;
    exit: number;
    file: string | null;
    columns: number | null;
    contains: boolean;
  };
}

export interface DocCommand {
  block: DocBlock;
  command: string;
  /** The lines the page shows after the command, up to the next `$ ` line. */
  output: string[];
}

/** Every fenced block of a page under the repository root. */
export function docBlocks(file: string): DocBlock[] {
  const lines = readFileSync(path.join(ROOT, file), 'utf8').split('\n');
  const blocks: DocBlock[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^```(\S*)\s*$/.exec(lines[i]!);
    if (!open) continue;
    const start = i;
    const body: string[] = [];
    for (i++; i < lines.length && lines[i] !== '```'; i++) body.push(lines[i]!);
    const marker = /^<!--\s*docs-test:(.*)-->\s*$/.exec(lines[start - 1] ?? '');
    const words = marker ? marker[1]!.trim().split(/\s+/) : [];
    const value = (key: string) => words.find((w) => w.startsWith(`${key}=`))?.slice(key.length + 1) ?? null;
    blocks.push({
      file,
      line: start + 1,
      lang: open[1]!,
      text: body.join('\n') + '\n',
      marks: {
        skip: words.includes('skip'),
        loose: words.includes('loose'),
        retry: words.includes('retry'),
        exit: Number(value('exit') ?? 0),
        file: value('file'),
        columns: value('columns') === null ? null : Number(value('columns')),
        contains: words.includes('contains'),
      },
    });
  }
  return blocks;
}

/** The `$ ` commands of a page's `console` blocks, in page order, with their shown output. */
export function docCommands(file: string): DocCommand[] {
  const out: DocCommand[] = [];
  for (const block of docBlocks(file)) {
    if (block.lang !== 'console' || block.marks.skip) continue;
    for (const line of block.text.split('\n')) {
      if (line.startsWith('$ ')) out.push({ block, command: line.slice(2), output: [] });
      else if (out.length > 0 && out.at(-1)!.block === block) out.at(-1)!.output.push(line);
    }
  }
  return out;
}

/**
 * A line as compared: colours stripped, durations, run keys' random suffixes and numbers made
 * uniform, runs of spaces made one (table columns move with their widest value).
 */
export function normalizeLine(line: string): string {
  return (
    line
      .replace(/\x1b\[[0-9;]*m/g, '')
      .replace(/__[0-9a-f]{6}\b/g, '__x')
      // A replica's default id: host-pid-random.
      .replace(/\b[\w.]+-\d+-[0-9a-f]{4}\b/g, 'REPLICA')
      .replace(/\b\d+(?:\.\d+)?(?:ms|s|m|h|d)\b/g, 'D')
      .replace(/\d+/g, '0')
      .replace(/\s+/g, ' ')
      .trim()
  );
}

/** How a shown line is compared: all of it, its first fields, or anywhere within a real line. */
export interface Compare {
  columns?: number | null;
  contains?: boolean;
}

/** A documented line as a pattern: `…` stands for anything. */
function linePattern(documented: string, how: Compare = {}): RegExp {
  const line = normalizeLine(documented);
  const escape = (text: string) =>
    text
      .split('…')
      .map((p) => p.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'))
      .join('.*');
  if (how.columns) {
    // The first fields, and a row's closing wait reason (DAG_PAUSED, …) wherever the row ends.
    const fields = line.split(' ');
    const reason =
      fields.length > how.columns && /^[a-z]/.test(fields[0]!) && /^[A-Z][A-Z_]+(:.*)?$/.test(fields.at(-1)!)
        ? fields.at(-1)!
        : null;
    const head = escape(fields.slice(0, how.columns).join(' '));
    return new RegExp(reason ? `^${head} .* ${escape(reason)}$` : `^${head}( |$)`);
  }
  return new RegExp(how.contains ? escape(line) : `^${escape(line)}$`);
}

/**
 * What the documented output lacks against the real one, or null when it matches: every shown
 * line must be among the real lines (in any order; moves of parallel tasks interleave), or, for
 * a `loose` block, the first and last shown lines must be the real first and last.
 */
export function outputMismatch(documented: string[], actual: string, loose: boolean, how: Compare = {}): string | null {
  const shown = documented.filter((l) => l.trim() !== '' && l.trim() !== '…');
  const real = actual
    .split('\n')
    .map(normalizeLine)
    .filter((l) => l !== '');
  if (shown.length === 0) return null;
  if (loose) {
    const ends: [string, string | undefined][] = [
      [shown[0]!, real[0]],
      [shown.at(-1)!, real.at(-1)],
    ];
    for (const [doc, got] of ends) {
      if (got === undefined || !linePattern(doc).test(got))
        return `expected a line like\n  ${doc}\ngot\n  ${got ?? '(nothing)'}`;
    }
    return null;
  }
  for (const doc of shown) {
    if (!real.some((r) => linePattern(doc, how).test(r)))
      return `no line like\n  ${doc}\nin\n${real.map((r) => `  ${r}`).join('\n')}`;
  }
  return null;
}
