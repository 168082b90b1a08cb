import { readdir, stat } from 'node:fs/promises';
import path from 'node:path';

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
