import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/**
 * The editions a contract test runs against, as a server is started for each: Lite as shipped,
 * Pro with the subprocess executor (the Kubernetes executor is not in this build), so the Pro run
 * differs from the Lite one by what the edition wires: its 16-drainer, 256-deep dispatch pool and
 * the database pool sized for it.
 */
export const EDITIONS = [
  { edition: 'lite', flags: ['--edition', 'lite'] },
  { edition: 'pro', flags: ['--edition', 'pro', '--executor', 'subprocess'] },
] as const;

export type EditionName = (typeof EDITIONS)[number]['edition'];

/** An edition's defaults, as `editions/<edition>/config.json` gives them. */
export function editionDefaults(edition: EditionName): Record<string, string | number> {
  return JSON.parse(
    readFileSync(fileURLToPath(new URL(`../../editions/${edition}/config.json`, import.meta.url)), 'utf8'),
  ) as Record<string, string | number>;
}

/** The dispatch pool an edition wires: drainers and queue capacity. */
export function editionPool(edition: EditionName): { workers: number; capacity: number } {
  const d = editionDefaults(edition);
  return { workers: Number(d.dispatch_workers), capacity: Number(d.dispatch_queue) };
}
