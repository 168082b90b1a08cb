import type { MessageInitShape } from '@bufbuild/protobuf';
import { durationFromMs } from '@bufbuild/protobuf/wkt';
import type { Logger } from 'pino';
import { fingerprint } from '../../core/fingerprint.js';
import type { ConnectResponseSchema, Hello } from '../../gen/leoflow/v1/agent_pb.js';
import type { AgentConnectionDeps } from './connection-deps.js';
import type { HeldRef } from './heartbeat-buffer.js';
import type { StreamAttempts } from './held-attempts.js';

type Response = MessageInitShape<typeof ConnectResponseSchema>;

/**
 * Takes back the attempts the agent holds that are still its own, tells it which are not, ends
 * what an earlier process of the agent was given and this one does not hold, and sends Welcome.
 * Returns the attempts resumed.
 */
export async function resumeAgent(
  deps: AgentConnectionDeps,
  attempts: StreamAttempts,
  send: (welcome: Response) => void,
  hello: Hello,
  held: HeldRef[],
  log: Logger,
): Promise<HeldRef[]> {
  const { store } = deps;
  const current = await store.currentAttempts(hello.agentId, hello.incarnationId, held);
  const resumed = held.filter((r) => current.has(r.attemptToken));
  const superseded = held.filter((r) => !current.has(r.attemptToken));
  for (const r of resumed) attempts.held.set(r.tiId, r);
  const logs = await store.logsSoFar(resumed);
  for (const r of resumed) attempts.logSeq.set(r.attemptToken, logs.get(`${r.tiId}/${r.tryNumber}`)?.lastSeq ?? 0);
  // The agent still holds attempts that were given to someone else meanwhile: a zombie's claim.
  for (const r of superseded) {
    deps.onRejected('hello', 'stale');
    log.warn(
      { tiId: r.tiId, try: r.tryNumber },
      'agent reconnected holding a superseded attempt: it is told to stop it',
    );
  }
  // Over: retried with a new token, never sent here with the old one.
  const abandoned = await store.endAbandoned(hello.agentId, hello.incarnationId);
  for (const a of abandoned) {
    log.warn(
      {
        tiId: a.tiId,
        runId: a.runId,
        taskId: a.taskId,
        try: a.tryNumber,
        verdict: a.verdict,
        earlierIncarnation: fingerprint(a.deliveredTo),
      },
      `task ${a.taskId} lost: agent ${hello.agentId} restarted and no longer holds it: ${a.verdict}`,
    );
  }
  if (abandoned.length > 0) deps.onAbandoned(abandoned);
  // Where else to go, for an agent given this replica's address only (a failed read costs the
  // agent that knowledge, not its stream).
  const replicaUrls = await deps.replicaUrls().catch((err: unknown) => {
    log.warn({ err }, "could not read the replicas' addresses for Welcome");
    return [];
  });
  send({
    msg: {
      case: 'welcome',
      value: {
        protocolVersion: hello.protocolVersion,
        replicaId: deps.replicaId,
        keepaliveInterval: durationFromMs(deps.keepaliveMs),
        maxReconnectBackoff: durationFromMs(deps.maxReconnectBackoffMs),
        heartbeatThreshold: durationFromMs(deps.heartbeatThresholdMs),
        replicaUrls,
        resumed,
        superseded,
        logsSoFar: resumed.map((r) => {
          const so = logs.get(`${r.tiId}/${r.tryNumber}`);
          return {
            attempt: r,
            stdoutLines: so?.stdout ?? 0,
            stderrLines: so?.stderr ?? 0,
            lastSeq: so?.lastSeq ?? 0,
          };
        }),
      },
    },
  });
  log.info(
    { labels: hello.labels, slots: hello.slots, resumed: resumed.length, superseded: superseded.length },
    `agent ${hello.agentId} connected`,
  );
  return resumed;
}
