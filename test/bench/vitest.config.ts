import { defineConfig } from 'vitest/config';

/** `npm run bench`: benchmarks, never part of `npm test`. One file at a time, so they don't
 *  compete for the machine's two cores. The files that import the peers are in bench/, where
 *  bench/node_modules (installed by `npm run bench`) resolves them. */
export default defineConfig({
  test: {
    // Named: global-setup starts no database for a project without a name (the main config's root).
    name: 'bench',
    include: ['test/bench/**/*.bench.ts', 'bench/*.bench.ts'],
    globalSetup: ['test/helpers/global-setup.ts', 'test/bench/run-started.ts'],
    fileParallelism: false,
    testTimeout: 600_000,
    hookTimeout: 120_000,
  },
});
