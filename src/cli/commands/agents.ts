import type { Command } from 'commander';
import { AgentHealth, type Agent } from '../../gen/leoflow/v1/cluster_pb.js';
import type { Clients } from '../client.js';
import { table, time } from '../format.js';
import { paintState } from '../paint-state.js';

function labelsText(a: Agent): string {
  return Object.entries(a.labels)
    .map(([k, v]) => `${k}=${v}`)
    .join(',');
}

/** healthy, stale or dead, by its last keepalive; stopped once it said goodbye. */
export function agentHealthText(h: AgentHealth): string {
  return h === AgentHealth.HEALTHY
    ? 'healthy'
    : h === AgentHealth.STALE
      ? 'stale'
      : h === AgentHealth.DEAD
        ? 'dead'
        : h === AgentHealth.STOPPED
          ? 'stopped'
          : 'unknown';
}

function agentJson(a: Agent) {
  return {
    agent_id: a.agentId,
    health: agentHealthText(a.health),
    connected: a.connected,
    draining: a.draining,
    slots: a.slots,
    running: a.running,
    labels: a.labels,
    capabilities: a.capabilities,
    connected_replica: a.connectedReplica || null,
  };
}

export function registerAgents(program: Command, clients: () => Clients): void {
  const agents = program.command('agents').description('list, drain and forget the agents known to the control plane');

  agents
    .command('list')
    .description(
      'list agents, connected or not, each healthy, stopped (it ended its stream itself: a clean stop), ' +
        'stale (silent past a few keepalives) or dead (past the heartbeat threshold: its attempts were retried)',
    )
    .option('-o, --output <format>', 'table | json', 'table')
    .action(async (opts: { output: string }) => {
      const res = await clients().cluster.listAgents({});
      if (opts.output === 'json') {
        process.stdout.write(JSON.stringify(res.agents.map(agentJson)) + '\n');
        return;
      }
      process.stdout.write(
        table(
          [
            'AGENT',
            'HEALTH',
            'CONNECTED',
            'DRAINING',
            'RUNNING',
            'SLOTS',
            'LABELS',
            'CAPABILITIES',
            'REPLICA',
            'LAST SEEN',
          ],
          res.agents.map((a) => [
            a.agentId,
            paintState(agentHealthText(a.health)),
            a.connected ? 'yes' : 'no',
            a.draining ? 'yes' : 'no',
            String(a.running),
            String(a.slots),
            labelsText(a) || '-',
            a.capabilities.join(',') || '-',
            a.connectedReplica || '-',
            time(a.lastSeenAt),
          ]),
        ) + '\n',
      );
    });

  agents
    .command('drain')
    .description('cordon an agent: it gets no new work and finishes what it holds (--undrain: take work again)')
    .argument('<agent_id>')
    .option('--undrain', 'let the agent take work again')
    .action(async (agentId: string, opts: { undrain?: boolean }) => {
      const res = await clients().cluster.drainAgent({ agentId, undrain: opts.undrain ?? false });
      const a = res.agent!;
      process.stdout.write(
        `agent ${a.agentId} ${a.draining ? 'draining' : 'undrained'} (${a.running} running, ` +
          `${a.connected ? 'connected' : 'not connected'})\n`,
      );
    });

  agents
    .command('forget')
    .description(
      'forget a disconnected agent that holds no attempt: `agents list` no longer shows it; ' +
        'the same id may connect again later, as a new agent',
    )
    .argument('<agent_id>')
    .action(async (agentId: string) => {
      const res = await clients().cluster.forgetAgent({ agentId });
      process.stdout.write(`agent ${agentId} forgotten (last seen ${time(res.lastSeenAt)})\n`);
    });
}
