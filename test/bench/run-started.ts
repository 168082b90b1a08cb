import type { TestProject } from 'vitest/node';

declare module 'vitest' {
  export interface ProvidedContext {
    /** When this `vitest run` of the benchmarks began (ISO 8601): results written before it are
     *  an earlier run's. */
    benchRunStartedAt: string;
  }
}

export default function setup(project: TestProject) {
  project.provide('benchRunStartedAt', new Date().toISOString());
}
