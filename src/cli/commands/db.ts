import { timestampFromDate } from '@bufbuild/protobuf/wkt';
import type { Command } from 'commander';
import type { HistoryCounts } from '../../gen/leoflow/v1/workflow_pb.js';
import type { Clients } from '../client.js';
import { confirm } from '../confirm.js';
import { table } from '../format.js';
import { parseTime } from '../parse-time.js';

/** Counts by table, as `db clean` and `dag delete` show them. */
export function countsTable(c: HistoryCounts | undefined): string {
  const rows: [string, bigint][] = [
    ['dag_runs', c?.runs ?? 0n],
    ['task_instances', c?.taskInstances ?? 0n],
    ['events', c?.events ?? 0n],
    ['task_logs', c?.taskLogs ?? 0n],
  ];
  return table(['TABLE', 'ROWS'], rows.map(([t, n]) => [t, String(n)]));
}

export function countsJson(c: HistoryCounts | undefined): Record<string, number> {
  return { dag_runs: Number(c?.runs ?? 0n), task_instances: Number(c?.taskInstances ?? 0n), events: Number(c?.events ?? 0n), task_logs: Number(c?.taskLogs ?? 0n) };
}

export function registerDb(program: Command, clients: () => Clients): void {
  const db = program.command('db').description('maintain the database');

  db.command('clean')
    .description('remove finished runs (success, failed, cancelled) that ended before a time, with their task instances, events and logs; runs that have not ended are kept')
    .requiredOption('--before <time>', 'runs that ended before this: YYYY-MM-DD (midnight UTC) or a time with its zone (2026-01-31T18:00:00Z)')
    .option('--dag <dag_id>', 'only this DAG')
    .option('--dry-run', 'remove nothing; say what would be removed, per table')
    .option('-y, --yes', 'do not ask for confirmation')
    .option('-o, --output <format>', 'table | json', 'table')
    .action(async (opts: { before: string; dag?: string; dryRun?: boolean; yes?: boolean; output: string }) => {
      const before = parseTime('--before', opts.before);
      const req = { before: timestampFromDate(before), dagId: opts.dag ?? '' };
      const what = `finished runs of ${opts.dag ? `DAG ${opts.dag}` : 'every DAG'} that ended before ${before.toISOString()}`;
      const show = (res: { counts?: HistoryCounts; dryRun: boolean }, done: string) => {
        if (opts.output === 'json') {
          process.stdout.write(JSON.stringify({ dry_run: res.dryRun, before: before.toISOString(), dag_id: opts.dag ?? null, counts: countsJson(res.counts) }) + '\n');
          return;
        }
        process.stdout.write(`${what}:\n${countsTable(res.counts)}\n${done}\n`);
      };
      if (opts.dryRun) {
        show(await clients().workflow.cleanHistory({ ...req, dryRun: true }), 'dry run: nothing was removed');
        return;
      }
      if (!opts.yes) {
        const preview = await clients().workflow.cleanHistory({ ...req, dryRun: true });
        if ((preview.counts?.runs ?? 0n) === 0n) {
          show(preview, 'nothing to remove');
          return;
        }
        process.stdout.write(`${what}:\n${countsTable(preview.counts)}\n`);
        const refusal = 'db clean removes history for good: pass --yes to go ahead (or --dry-run to see what it would remove)';
        if (!(await confirm('Remove them?', refusal))) {
          process.stdout.write('nothing was removed\n');
          return;
        }
      }
      show(await clients().workflow.cleanHistory({ ...req, dryRun: false }), 'removed');
    });
}
