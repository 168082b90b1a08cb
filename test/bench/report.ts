import { mkdir, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { ROOT } from '../helpers/leoflow-process.js';

/** Percentile of a sample (nearest rank). */
export function percentile(values: number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

export function machine(): Record<string, unknown> {
  return {
    cpus: os.cpus().length,
    cpu: os.cpus()[0]?.model,
    memGiB: Math.round(os.totalmem() / 2 ** 30),
    node: process.version,
    platform: `${os.platform()} ${os.release()}`,
  };
}

/** Prints a table and writes the machine-readable results to test/bench/results/<name>.json. */
export async function report(
  name: string,
  rows: Record<string, string | number>[],
  extra: Record<string, unknown> = {},
): Promise<void> {
  const cols = Object.keys(rows[0] ?? {});
  const widths = cols.map((c) => Math.max(c.length, ...rows.map((r) => String(r[c]).length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padEnd(widths[i]!)).join(' | ');
  const text = [
    line(cols),
    widths.map((w) => '-'.repeat(w)).join('-|-'),
    ...rows.map((r) => line(cols.map((c) => String(r[c])))),
  ].join('\n');
  process.stdout.write(`\n== ${name}\n${text}\n`);
  const dir = path.join(ROOT, 'test/bench/results');
  await mkdir(dir, { recursive: true });
  await writeFile(
    path.join(dir, `${name}.json`),
    JSON.stringify({ name, at: new Date().toISOString(), machine: machine(), rows, ...extra }, null, 2) + '\n',
  );
}
