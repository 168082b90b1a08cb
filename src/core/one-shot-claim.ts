import { AGENT_FEATURES, needsSecretEnv } from './agent-features.js';
import type { TaskDefinition } from './dag-spec.js';
import { placementMismatch } from './placement.js';

/**
 * Why an agent may not take a task instance for itself (`Hello.only_ti_id` without an attempt
 * token), or null when it may: only when the leader would have placed it there. The same rules
 * as placement (placement.ts), with what a one-shot claim adds: the task must run on agents and
 * wait to be placed, and a task with secret variables needs an agent that reads them.
 */
export function oneShotRefusal(
  ti: {
    executor: string;
    state: string;
    agentId: string | null;
    task: Pick<TaskDefinition, 'placement' | 'secretEnv'>;
  },
  agent: { agentId: string; labels: Record<string, string>; capabilities: string[] },
): string | null {
  if (ti.executor !== 'agents') return `the task runs on the ${ti.executor} executor, not on agents`;
  if (ti.agentId !== null && ti.agentId !== agent.agentId) return 'the task instance is given to another agent';
  if (ti.agentId === null && ti.state !== 'scheduled')
    return `the task instance is ${ti.state}, not waiting to be placed`;
  const mismatch = placementMismatch(ti.task.placement, agent);
  if (mismatch) return mismatch;
  if (needsSecretEnv(ti.task) && !agent.capabilities.includes(AGENT_FEATURES.secretEnv)) {
    return `the task has secret variables and the agent did not announce ${AGENT_FEATURES.secretEnv}`;
  }
  return null;
}
