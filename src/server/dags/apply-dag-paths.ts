import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type { DagSpec } from '../../core/dag-spec.js';
import { upsertDag, type ApplyOutcome } from '../../db/dags.js';
import type { Sql } from '../../db/sql.js';
import { expandDagPaths } from '../../core/expand-dag-paths.js';

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
  for (const p of parsed)
    out.push({ dagId: p.spec.dagId, file: p.file, outcome: (await upsertDag(sql, p.spec, p.source)).outcome });
  return out;
}
