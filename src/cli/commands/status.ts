import { timestampDate } from '@bufbuild/protobuf/wkt';
import type { Command } from 'commander';
import type { GetHealthResponse } from '../../gen/leoflow/v1/cluster_pb.js';
import type { Clients } from '../client.js';

/** The cluster's health as JSON, with snake_case names like the other commands' `-o json`. */
function statusJson(h: GetHealthResponse) {
  return {
    replica_id: h.replicaId,
    role: h.role,
    edition: h.edition,
    leader: h.leader,
    leader_id: h.leaderId || null,
    live: h.live,
    ready: h.ready,
    database: {
      reachable: h.databaseReachable,
      latency_ms: h.databaseReachable ? Number(h.databaseLatencyMs.toFixed(2)) : null,
      migrations_version: h.migrationsVersion || null,
    },
    agents: { healthy: h.agentsHealthy, stale: h.agentsStale, dead: h.agentsDead, stopped: h.agentsStopped },
    dispatch_queue: { depth: h.dispatchQueueDepth, capacity: h.dispatchQueueCapacity },
    last_full_step: h.lastFullStepAt
      ? { at: timestampDate(h.lastFullStepAt).toISOString(), late_ms: Number(h.lastFullStepLateMs) }
      : null,
    replicas: h.replicas.map((r) => ({ replica_id: r.replicaId, role: r.role, leader: r.leader })),
    failed_checks: [...h.liveChecks, ...h.readyChecks]
      .filter((c) => !c.ok)
      .map((c) => ({ name: c.name, detail: c.detail })),
  };
}

/** One screen: the answering replica, the database, the leader and its loop, the work queue, the agents. */
function statusText(h: GetHealthResponse): string {
  const lines: string[] = [];
  const state = h.live && h.ready ? 'ok' : !h.live ? 'NOT LIVE' : 'NOT READY';
  lines.push(`${state}: replica ${h.replicaId} (role ${h.role}, ${h.edition}${h.leader ? ', leader' : ''})`);
  lines.push(
    h.databaseReachable
      ? `database   reachable in ${h.databaseLatencyMs.toFixed(1)} ms, migrations at ${h.migrationsVersion || 'none'}`
      : 'database   UNREACHABLE',
  );
  if (!h.leaderId) lines.push('leader     NONE: nothing is scheduled until a replica with role auto or leader leads');
  else if (h.lastFullStepAt) {
    const late = Number(h.lastFullStepLateMs);
    const ago = (Date.now() - timestampDate(h.lastFullStepAt).getTime()) / 1000;
    lines.push(
      `leader     ${h.leaderId}${h.leader ? ' (this replica)' : ''}; last full step ${ago.toFixed(1)} s ago, ` +
        `${late === 0 ? 'on time' : `${(late / 1000).toFixed(1)} s late`}`,
    );
  } else lines.push(`leader     ${h.leaderId} (it has not told its last full step yet)`);
  lines.push(`queue      ${h.dispatchQueueDepth}/${h.dispatchQueueCapacity} in this replica's dispatch queue`);
  lines.push(
    `agents     ${h.agentsHealthy} healthy, ${h.agentsStale} stale, ${h.agentsDead} dead, ${h.agentsStopped} stopped`,
  );
  if (h.replicas.length > 0)
    lines.push(
      `replicas   ${h.replicas.map((r) => `${r.replicaId} (${r.role}${r.leader ? ', leader' : ''})`).join(', ')}`,
    );
  for (const c of [...h.liveChecks, ...h.readyChecks].filter((c) => !c.ok))
    lines.push(`FAIL       ${c.name}: ${c.detail}`);
  return lines.join('\n') + '\n';
}

export function registerStatus(program: Command, clients: () => Clients): void {
  program
    .command('status')
    .description(
      "the cluster's health at a glance: this replica, the database, the leader's loop, the queue, " +
        'the agents (exit 1 when not live or not ready)',
    )
    .option('-o, --output <format>', 'table | json', 'table')
    .action(async (opts: { output: string }) => {
      if (opts.output !== 'table' && opts.output !== 'json')
        throw new Error(`--output: expected table or json, got ${JSON.stringify(opts.output)}`);
      const h = await clients().cluster.getHealth({});
      process.stdout.write(opts.output === 'json' ? JSON.stringify(statusJson(h)) + '\n' : statusText(h));
      if (!h.live || !h.ready) process.exitCode = 1;
    });
}
