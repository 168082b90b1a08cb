import { ConfigError } from '../../src/server/config/config-error.js';
import { loadConfig } from '../../src/server/config/load-config.js';

/** The problems `loadConfig` reports for these flags and environment; throws if it reports none. */
export function configProblems(flags: Parameters<typeof loadConfig>[0], env: NodeJS.ProcessEnv = {}): string[] {
  try {
    loadConfig(flags, env, '/srv');
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw err;
  }
  throw new Error('expected a ConfigError');
}
