import { defineConfig } from 'vitest/config';

/**
 * Projects, so the fast ones give feedback in seconds: unit (no database; a test that runs tools or
 * processes for seconds belongs to integration), integration (real Postgres in-process, or real
 * tools and processes: buf, kubectl, promtool, shims),
 * e2e (real `leoflow` processes), fault (the safety net under injected faults). One embedded
 * Postgres serves the run (or TEST_DATABASE_URL's server), for every project but unit; every test
 * file gets its own database from a template.
 */
export default defineConfig({
  test: {
    globalSetup: ['test/helpers/global-setup.ts'],
    // Fails a file that leaves a process, a server or a connection behind.
    setupFiles: ['test/helpers/leak-check.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    projects: [
      // Pure tests share their workers' module graph (no isolation): loading the sources again for
      // each file was most of the project's time.
      { extends: true, test: { name: 'unit', include: ['test/unit/**/*.test.ts'], isolate: false } },
      { extends: true, test: { name: 'integration', include: ['test/integration/**/*.test.ts'] } },
      { extends: true, test: { name: 'e2e', include: ['test/e2e/**/*.test.ts'], testTimeout: 120_000 } },
      { extends: true, test: { name: 'fault', include: ['test/fault/**/*.test.ts'], testTimeout: 120_000 } },
      // Timing against a yardstick: run alone, after the other projects have finished (group 1),
      // so their load is not measured as a regression.
      {
        extends: true,
        test: {
          name: 'speed',
          include: ['test/speed/**/*.test.ts'],
          testTimeout: 300_000,
          sequence: { groupOrder: 1 },
        },
      },
      // Step-time bounds (a p99 under 100 ms): after the speed guard, apart from the other projects,
      // whose CPU on a loaded runner made one step in 70-200 slow.
      {
        extends: true,
        test: {
          name: 'timing',
          include: ['test/timing/**/*.test.ts'],
          testTimeout: 120_000,
          sequence: { groupOrder: 2 },
        },
      },
      // Needs Debian's python3-grpcio, python3-grpc-tools and protoc: `npm run test:python` (in CI).
      { extends: true, test: { name: 'python', include: ['test/python/**/*.test.ts'], testTimeout: 120_000 } },
    ],
  },
});
