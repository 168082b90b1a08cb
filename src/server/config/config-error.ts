// The one error a bad configuration throws, with every problem found, so the CLI can print them
// all and tell them apart from a failure to start.

/** Thrown with every problem of a configuration, each naming the flag or variable it came from. */
export class ConfigError extends Error {
  override readonly name = 'ConfigError';
  constructor(readonly problems: string[]) {
    super(`invalid configuration:\n${problems.map((p) => `  - ${p}`).join('\n')}`);
  }
}
