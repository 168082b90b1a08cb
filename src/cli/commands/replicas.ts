import type { Command } from 'commander';
import type { Clients } from '../client.js';
import { table, time } from '../format.js';

export function registerReplicas(program: Command, clients: () => Clients): void {
  program
    .command('replicas')
    .description('list the control-plane replicas serving the database, with their roles and the leader')
    .option('-o, --output <format>', 'table | json', 'table')
    .action(async (opts: { output: string }) => {
      const res = await clients().cluster.getLeader({});
      if (opts.output === 'json') {
        const replicas = res.replicas.map((r) => ({ replica_id: r.replicaId, role: r.role, leader: r.leader }));
        process.stdout.write(
          JSON.stringify({
            leader_id: res.leaderId || null,
            answered_by: res.replicaId,
            edition: res.edition,
            replicas,
          }) + '\n',
        );
        return;
      }
      process.stdout.write(
        table(
          ['REPLICA', 'ROLE', 'LEADER', 'CONNECTED SINCE'],
          res.replicas.map((r) => [
            r.replicaId + (r.replicaId === res.replicaId ? ' (answered)' : ''),
            r.role,
            r.leader ? 'yes' : 'no',
            time(r.connectedSince),
          ]),
        ) + '\n',
      );
      if (!res.leaderId)
        process.stdout.write('no replica leads: nothing is scheduled until one with role auto or leader is up\n');
    });
}
