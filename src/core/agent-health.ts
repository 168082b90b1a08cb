/**
 * An agent's state by its last keepalive, as an operator reads it: healthy while its stream is
 * open and it keeps alive; stopped once it has disconnected after saying goodbye (it ended its
 * stream itself: a clean stop); else stale once it has been silent longer than a few keepalives
 * but less than the heartbeat threshold (its attempts are still its own: a network blip it may
 * come back from); dead past the threshold, when the heartbeat reaper has ended its attempts as lost.
 */
export type AgentHealthName = 'healthy' | 'stale' | 'dead' | 'stopped';

export function agentHealth(
  a: { connected: boolean; lastSeenAt: Date | null; stoppedAt?: Date | null },
  o: { freshMs: number; thresholdMs: number; now: number },
): AgentHealthName {
  if (!a.connected && a.stoppedAt) return 'stopped';
  if (a.lastSeenAt === null) return 'dead';
  const silentMs = o.now - a.lastSeenAt.getTime();
  if (a.connected && silentMs < o.freshMs) return 'healthy';
  return silentMs < o.thresholdMs ? 'stale' : 'dead';
}
