import type { Command } from 'commander';
import type { Notification } from '../../gen/leoflow/v1/cluster_pb.js';
import type { Clients } from '../client.js';
import { isoTime, table, time } from '../format.js';
import { paintState } from '../paint-state.js';

function notificationJson(n: Notification) {
  return {
    id: n.id,
    run_id: n.runId,
    dag_id: n.dagId,
    kind: n.kind,
    receiver: n.receiver,
    task_id: n.taskId || null,
    state: n.state,
    attempts: n.attempts,
    last_error: n.lastError || null,
    created_at: isoTime(n.createdAt),
    delivered_at: isoTime(n.deliveredAt),
    next_at: n.state === 'pending' ? isoTime(n.nextAt) : null,
  };
}

export function registerNotifications(program: Command, clients: () => Clients): void {
  const notifications = program
    .command('notifications')
    .description('what was told of ended runs, and to whom (--notify): delivered, pending or failed');

  notifications
    .command('list')
    .description('list notifications, newest first, with their deliveries and why the last one failed')
    .option('--state <state>', 'only pending, delivered or failed ones')
    .option('--dag <dag_id>', "only this DAG's")
    .option('--limit <n>', 'at most this many (1-1000)', '50')
    .option('-o, --output <format>', 'table | json', 'table')
    .action(async (opts: { state?: string; dag?: string; limit: string; output: string }) => {
      const res = await clients().cluster.listNotifications({
        state: opts.state ?? '',
        dagId: opts.dag ?? '',
        limit: Number(opts.limit),
      });
      if (opts.output === 'json') {
        process.stdout.write(JSON.stringify(res.notifications.map(notificationJson)) + '\n');
        return;
      }
      process.stdout.write(
        table(
          ['ID', 'RUN', 'DAG', 'KIND', 'RECEIVER', 'STATE', 'TRIES', 'CREATED', 'LAST ERROR'],
          res.notifications.map((n) => [
            n.id,
            n.runId,
            n.dagId,
            n.kind,
            n.receiver,
            paintState(n.state),
            String(n.attempts),
            time(n.createdAt),
            n.lastError || '-',
          ]),
        ),
      );
    });
}
