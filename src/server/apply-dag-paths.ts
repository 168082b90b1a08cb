import { readdir, readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import type { DagSpec } from '../core/dag-spec.js';
import { upsertDag, type ApplyOutcome } from '../db/dags.js';
import type { Sql } from '../db/sql.js';

const DAG_FILE = /\.(ya?ml|json)$/i;

/** Expands files and folders (one level: `*.yaml`, `*.yml`, `*.json`) into DAG files, sorted. */
export async function expandDagPaths(paths: string[]): Promise<string[]> {
  const files: string[] = [];
  for (const p of paths) {
    let st;
    try {
      st = await stat(p);
    } catch {
      throw new Error(`DAG path ${p} does not exist`);
    }
    if (st.isDirectory()) {
      const names = (await readdir(p)).filter((n) => DAG_FILE.test(n)).sort();
      files.push(...names.map((n) => path.join(p, n)));
    } else files.push(p);
  }
  return files;
}

/**
 * Parses every file first and writes only if all are valid, so a bad file in a folder never
 * leaves the store with half of a set of DAGs.
 */
export async function applyDagPaths(
  paths: string[],
  parse: (source: string, file: string) => Promise<DagSpec>,
  sql: Sql,
): Promise<{ dagId: string; file: string; outcome: ApplyOutcome }[]> {
  const files = await expandDagPaths(paths);
  const parsed = [];
  for (const file of files) {
    const source = await readFile(file, 'utf8');
    parsed.push({ file, source, spec: await parse(source, path.relative(process.cwd(), file) || file) });
  }
  const out = [];
  for (const p of parsed) out.push({ dagId: p.spec.dagId, file: p.file, outcome: (await upsertDag(sql, p.spec, p.source)).outcome });
  return out;
}
