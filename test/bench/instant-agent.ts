import { randomUUID } from 'node:crypto';
import { createClient } from '@connectrpc/connect';
import { createGrpcTransport } from '@connectrpc/connect-node';
import { AgentService, AttemptOutcome, ProtocolVersion } from '../../src/gen/leoflow/v1/agent_pb.js';
import { AsyncInbox } from '../helpers/scripted-agent.js';

type Msg =
  Parameters<ReturnType<typeof createClient<typeof AgentService>>['connect']>[0] extends AsyncIterable<infer T>
    ? T
    : never;

export interface InstantAgent {
  /** Assigns received so far. */
  readonly assigned: number;
  /** Ends the server acknowledged as written so far (FinishedAck applied). */
  readonly acked: number;
  close(): Promise<void>;
}

/**
 * A protocol-level agent that answers every Assign with Started and Finished (success, exit 0)
 * at once: the no-op job of the benchmarks, so what is measured is Leoflow's path (claim,
 * Assign down the stream, Started and Finished recorded, the next step), not a process spawn.
 * `onAssign` sees the moment each Assign arrived (performance.now()), for latency runs.
 */
export function startInstantAgent(
  baseUrl: string,
  opts: { agentId: string; slots: number; keepaliveMs?: number; onAssign?: (tiId: string, at: number) => void },
): InstantAgent {
  const client = createClient(AgentService, createGrpcTransport({ baseUrl }));
  const out = new AsyncInbox<Msg>();
  out.push({
    msg: {
      case: 'hello',
      value: {
        protocolVersion: ProtocolVersion.PROTOCOL_VERSION_2,
        agentId: opts.agentId,
        slots: opts.slots,
        incarnationId: randomUUID(),
      },
    },
  } as Msg);
  let seq = 1n;
  let assigned = 0;
  let acked = 0;
  const pump = setInterval(
    () => out.push({ msg: { case: 'keepalive', value: { seq: seq++, held: [] } } } as Msg),
    opts.keepaliveMs ?? 1000,
  );
  const done = (async () => {
    for await (const m of client.connect(out)) {
      if (m.msg.case === 'finishedAck' && m.msg.value.applied) acked++;
      if (m.msg.case !== 'assign') continue;
      const attempt = m.msg.value.attempt!;
      assigned++;
      opts.onAssign?.(attempt.tiId, performance.now());
      out.push({ msg: { case: 'started', value: { attempt, pid: 1 } } } as Msg);
      out.push({ msg: { case: 'finished', value: { attempt, outcome: AttemptOutcome.SUCCESS, exitCode: 0 } } } as Msg);
    }
  })().catch(() => {});
  return {
    get assigned() {
      return assigned;
    },
    get acked() {
      return acked;
    },
    async close() {
      clearInterval(pump);
      out.close();
      await done;
    },
  };
}
