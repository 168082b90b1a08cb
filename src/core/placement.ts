import { AGENT_FEATURES } from './agent-features.js';
import type { PlacementSpec } from './dag-spec.js';

/** An agent as placement sees it: what it offers and how loaded it is now. */
export interface AgentView {
  agentId: string;
  labels: Record<string, string>;
  capabilities: string[];
  slots: number;
  /** Attempts it holds now, all tasks. */
  running: number;
  /** Attempts of this very task it holds now. */
  runningThisTask: number;
}

export type PlacementDecision = { kind: 'placed'; agentId: string } | { kind: 'waiting'; reason: string };

/** `gpu=nvidia,zone=a` plus `+cap` for each required capability: the reason a TI waits. */
export function describeRequirements(p: PlacementSpec | null): string {
  if (!p) return '';
  const labels = Object.entries(p.labels)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([k, v]) => `${k}=${v}`);
  return [...labels, ...p.capabilities.map((c) => `+${c}`)].join(',');
}

/** The first placement rule the agent fails, named as the DAG file names it; null when it fits. */
export function placementMismatch(
  p: PlacementSpec | null,
  a: Pick<AgentView, 'agentId' | 'labels' | 'capabilities'>,
): string | null {
  if (!p) return null;
  if (p.allowedAgents.length > 0 && !p.allowedAgents.includes(a.agentId))
    return `placement.allowed_agents does not name agent "${a.agentId}"`;
  if (p.forbiddenAgents.includes(a.agentId)) return `placement.forbidden_agents names agent "${a.agentId}"`;
  for (const [k, v] of Object.entries(p.labels)) {
    if (a.labels[k] !== v)
      return `placement.labels needs ${k}=${v}, the agent has ${k in a.labels ? `${k}=${a.labels[k]}` : `no ${k}`}`;
  }
  for (const c of p.capabilities)
    if (!a.capabilities.includes(c)) return `placement.capabilities needs ${c}, which the agent did not announce`;
  return null;
}

function eligible(p: PlacementSpec | null, a: Pick<AgentView, 'agentId' | 'labels' | 'capabilities'>): boolean {
  return placementMismatch(p, a) === null;
}

/**
 * Why a task waits while the only agents that match it are draining (connected, finishing what
 * they hold, taking nothing new): `AGENT_DRAINING:<n> agent(s) with <requirements>`.
 */
export function agentDraining(n: number, p: PlacementSpec | null): string {
  const requirements = describeRequirements(p);
  return `AGENT_DRAINING:${n} agent${n === 1 ? '' : 's'}${requirements ? ` with ${requirements}` : ''}`;
}

/** Why a task with secret variables waits while only agents that would drop them match it. */
export const NO_AGENT_WITH_SECRET_ENV = `NO_AGENT_WITH_SECRET_ENV:${AGENT_FEATURES.secretEnv}`;

/**
 * Chooses the agent for one attempt: among agents that satisfy the task's placement (labels,
 * capabilities, allowed/forbidden ids), that can run it (a task with secret variables needs an
 * agent announcing `leoflow.secret-env`), that have a free slot and are under the task's
 * max_parallel_per_agent, the one with the most free slots — so load spreads. Otherwise says why
 * the attempt waits: AGENT_DRAINING:<n> agents with <requirements> (only `draining` agents match),
 * NO_AGENT_WITH_LABELS:<requirements>, NO_AGENT_WITH_SECRET_ENV:leoflow.secret-env,
 * AGENT_MAX_PARALLEL or AGENT_SLOTS_FULL. `draining` agents are never chosen.
 */
export function placeAttempt(
  p: PlacementSpec | null,
  agents: readonly AgentView[],
  needs: { secretEnv?: boolean } = {},
  draining: readonly Pick<AgentView, 'agentId' | 'labels' | 'capabilities'>[] = [],
): PlacementDecision {
  const eligibleAgents = agents.filter((a) => eligible(p, a));
  if (eligibleAgents.length === 0) {
    const drainingMatches = draining.filter((a) => eligible(p, a)).length;
    return {
      kind: 'waiting',
      reason:
        drainingMatches > 0 ? agentDraining(drainingMatches, p) : `NO_AGENT_WITH_LABELS:${describeRequirements(p)}`,
    };
  }
  const matching = needs.secretEnv
    ? eligibleAgents.filter((a) => a.capabilities.includes(AGENT_FEATURES.secretEnv))
    : eligibleAgents;
  if (matching.length === 0) return { kind: 'waiting', reason: NO_AGENT_WITH_SECRET_ENV };
  const withSlot = matching.filter((a) => a.running < a.slots);
  if (withSlot.length === 0) return { kind: 'waiting', reason: 'AGENT_SLOTS_FULL' };
  const max = p?.maxParallelPerAgent ?? null;
  const underMax = max === null ? withSlot : withSlot.filter((a) => a.runningThisTask < max);
  if (underMax.length === 0) return { kind: 'waiting', reason: 'AGENT_MAX_PARALLEL' };
  const best = [...underMax].sort(
    (a, b) =>
      b.slots - b.running - (a.slots - a.running) || a.running - b.running || a.agentId.localeCompare(b.agentId),
  )[0]!;
  return { kind: 'placed', agentId: best.agentId };
}
