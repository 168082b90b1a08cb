import type { DagSpec, PlacementSpec, TaskDefinition } from '../../src/core/dag-spec.js';

/** A task spec as the parser would produce it, with every default filled; override what matters. */
export function task(id: string, over: Partial<TaskDefinition> = {}): TaskDefinition {
  return {
    id,
    command: ['true'],
    dependsOn: [],
    triggerRule: 'all_success',
    retries: 0,
    retryDelayMs: 1000,
    maxRetryDelayMs: 60_000,
    timeoutMs: null,
    env: {},
    cwd: null,
    executor: 'default',
    image: null,
    placement: null,
    ...over,
  };
}

/** A DAG spec with every default filled. */
export function dag(dagId: string, tasks: TaskDefinition[], over: Partial<DagSpec> = {}): DagSpec {
  return {
    dagId,
    description: '',
    schedule: null,
    timezone: 'UTC',
    catchup: false,
    startDate: null,
    maxActiveRuns: 16,
    tags: [],
    tasks,
    ...over,
  };
}

/** A task's placement with no constraint but those given. */
export function placement(over: Partial<PlacementSpec> = {}): PlacementSpec {
  return { labels: {}, capabilities: [], allowedAgents: [], forbiddenAgents: [], maxParallelPerAgent: null, ...over };
}
