import { readFile } from 'node:fs/promises';
import type { DagSpec } from '../../core/dag-spec.js';
import { expandDagPaths } from '../../core/expand-dag-paths.js';

/**
 * The DAG files among `paths` (the server's start-up `--dags`) that define `dagId`, as absolute
 * paths: the server applies them again at its next start, so a DAG deleted while its file is
 * there comes back then. Read and parsed as the start-up does; a file that does not parse defines
 * nothing.
 */
export async function dagFilesDefining(
  paths: string[],
  dagId: string,
  parse: (source: string, file: string) => Promise<DagSpec>,
): Promise<string[]> {
  if (paths.length === 0) return [];
  const out: string[] = [];
  for (const file of await expandDagPaths(paths).catch(() => [])) {
    try {
      if ((await parse(await readFile(file, 'utf8'), file)).dagId === dagId) out.push(file);
    } catch {
      // Not a valid DAG file (or gone since): it brings back nothing.
    }
  }
  return out;
}
