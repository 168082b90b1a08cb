/**
 * A task's `placement`: which agents of the standalone fleet may run it. Every constraint is
 * optional; an empty mapping places the task anywhere.
 */
import type { DagIssue, PlacementSpec } from '../dag-spec.js';
import { isMapping, MAX_INT4, readInteger, readStringList, readStringMap } from './field-readers.js';
import { expected, keyPath, unknownKey } from './issue-messages.js';

const PLACEMENT_KEYS = [
  'labels',
  'capabilities',
  'allowed_agents',
  'forbidden_agents',
  'max_parallel_per_agent',
] as const;

/** Reads a placement mapping, filling absent constraints with "no constraint". */
export function readPlacement(value: unknown, path: string, issues: DagIssue[]): PlacementSpec | undefined {
  if (!isMapping(value)) {
    issues.push(expected('a placement mapping', value, path));
    return undefined;
  }
  const placement: Partial<PlacementSpec> = {};
  for (const [key, v] of Object.entries(value)) {
    const p = keyPath(path, key);
    switch (key) {
      case 'labels':
        placement.labels = readStringMap(v, p, issues, 'label');
        break;
      case 'capabilities':
        placement.capabilities = readStringList(v, p, issues, 'capability');
        break;
      case 'allowed_agents':
        placement.allowedAgents = readStringList(v, p, issues, 'agent id');
        break;
      case 'forbidden_agents':
        placement.forbiddenAgents = readStringList(v, p, issues, 'agent id');
        break;
      case 'max_parallel_per_agent':
        placement.maxParallelPerAgent = v === null ? null : readInteger(v, p, 1, MAX_INT4, issues);
        break;
      default:
        issues.push(unknownKey(key, p, PLACEMENT_KEYS));
    }
  }
  return {
    labels: placement.labels ?? {},
    capabilities: placement.capabilities ?? [],
    allowedAgents: placement.allowedAgents ?? [],
    forbiddenAgents: placement.forbiddenAgents ?? [],
    maxParallelPerAgent: placement.maxParallelPerAgent ?? null,
  };
}
