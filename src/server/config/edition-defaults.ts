// An edition's defaults, read from its file under `editions/`: plain data the flags and the
// environment override.
import { readFileSync } from 'node:fs';
import type { Edition } from './config.js';

/** Edition files sit at the package root; `dist/server/config` and `src/server/config` are at the same depth. */
const EDITIONS_DIR = new URL('../../../editions/', import.meta.url);

/** The settings of `editions/<edition>/config.json`, by key of SETTINGS. */
export function editionDefaults(edition: Edition): Record<string, unknown> {
  return JSON.parse(readFileSync(new URL(`${edition}/config.json`, EDITIONS_DIR), 'utf8')) as Record<string, unknown>;
}
