import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type { DagSpec } from '../../core/dag-spec.js';
import { upsertDag, type ApplyOutcome } from '../../db/dags.js';
import type { Sql } from '../../db/sql.js';
import { expandDagPaths } from '../../core/expand-dag-paths.js';

/** One DAG file, read and parsed. */
export interface ParsedDagFile {
  file: string;
  source: string;
  spec: DagSpec;
}

/** Reads and parses every file the paths name; rejects at the first that is not a valid DAG. */
export async function parseDagPaths(
  paths: string[],
  parse: (source: string, file: string) => Promise<DagSpec>,
): Promise<ParsedDagFile[]> {
  const files = await expandDagPaths(paths);
  const parsed = [];
  for (const file of files) {
    const source = await readFile(file, 'utf8');
    parsed.push({ file, source, spec: await parse(source, path.relative(process.cwd(), file) || file) });
  }
  return parsed;
}

/**
 * Writes DAG files parsed by {@link parseDagPaths}. Every file is parsed before any is written,
 * so a bad file in a folder never leaves the store with half of a set of DAGs.
 */
export async function applyParsedDags(
  parsed: ParsedDagFile[],
  sql: Sql,
): Promise<{ dagId: string; file: string; outcome: ApplyOutcome }[]> {
  const out = [];
  for (const p of parsed)
    out.push({ dagId: p.spec.dagId, file: p.file, outcome: (await upsertDag(sql, p.spec, p.source)).outcome });
  return out;
}
