import { timestampFromDate } from '@bufbuild/protobuf/wkt';
import type { Command } from 'commander';
import type { HistoryCounts } from '../../gen/leoflow/v1/workflow_pb.js';
import type { Clients } from '../client.js';
import { confirm } from '../confirm.js';
import { table } from '../format.js';
import { parseTime } from '../parse-time.js';
import { watchClean } from '../watch-clean.js';
import { DEFAULT_KEEP_LAST, MAX_KEEP_LAST } from '../../core/keep-last.js';

/** `--keep-last`: a whole number; its range is the server's to check (it names the limit). */
function parseKeepLast(value: string): number {
  const n = Number(value);
  if (!/^-?\d+$/.test(value) || !Number.isSafeInteger(n) || Math.abs(n) > 2 ** 31 - 1) {
    throw new Error(`--keep-last: must be a whole number from 0 to ${MAX_KEEP_LAST}, got ${JSON.stringify(value)}`);
  }
  return n;
}

function keptPhrase(keepLast: number): string {
  if (keepLast === 0) return '';
  return keepLast === 1 ? ", but each DAG's latest finished run" : `, but each DAG's latest ${keepLast} finished runs`;
}

/** Counts by table, as `db clean` and `dag delete` show them. */
export function countsTable(c: HistoryCounts | undefined): string {
  const rows: [string, bigint][] = [
    ['dag_runs', c?.runs ?? 0n],
    ['task_instances', c?.taskInstances ?? 0n],
    ['events', c?.events ?? 0n],
    ['task_logs', c?.taskLogs ?? 0n],
  ];
  return table(
    ['TABLE', 'ROWS'],
    rows.map(([t, n]) => [t, String(n)]),
  );
}

export function countsJson(c: HistoryCounts | undefined): Record<string, number> {
  return {
    dag_runs: Number(c?.runs ?? 0n),
    task_instances: Number(c?.taskInstances ?? 0n),
    events: Number(c?.events ?? 0n),
    task_logs: Number(c?.taskLogs ?? 0n),
  };
}

export function registerDb(program: Command, clients: () => Clients): void {
  const db = program.command('db').description('maintain the database');

  db.command('clean')
    .description(
      'remove finished runs (success, failed, cancelled) that ended before a time, with their task instances, ' +
        'events and logs; runs that have not ended are kept',
    )
    .requiredOption(
      '--before <time>',
      'runs that ended before this: YYYY-MM-DD (midnight UTC) or a time with its zone (2026-01-31T18:00:00Z)',
    )
    .option('--dag <dag_id>', 'only this DAG')
    .option(
      '--keep-last <n>',
      `keep each DAG's N latest finished runs whatever their age (0 keeps none; at most ${MAX_KEEP_LAST})`,
      String(DEFAULT_KEEP_LAST),
    )
    .option('--dry-run', 'remove nothing; say what would be removed, per table')
    .option('-y, --yes', 'do not ask for confirmation')
    .option('-o, --output <format>', 'table | json', 'table')
    .action(
      async (opts: {
        before: string;
        dag?: string;
        keepLast: string;
        dryRun?: boolean;
        yes?: boolean;
        output: string;
      }) => {
        const before = parseTime('--before', opts.before);
        const keepLast = parseKeepLast(opts.keepLast);
        const req = { before: timestampFromDate(before), dagId: opts.dag ?? '', keepLast };
        const what =
          `finished runs of ${opts.dag ? `DAG ${opts.dag}` : 'every DAG'} that ended before ` +
          `${before.toISOString()}${keptPhrase(keepLast)}`;
        const show = (res: { counts?: HistoryCounts; dryRun: boolean; stopped?: boolean }, done: string) => {
          if (opts.output === 'json') {
            const stopped = res.dryRun ? {} : { stopped: res.stopped ?? false };
            process.stdout.write(
              JSON.stringify({
                dry_run: res.dryRun,
                ...stopped,
                before: before.toISOString(),
                dag_id: opts.dag ?? null,
                keep_last: keepLast,
                counts: countsJson(res.counts),
              }) + '\n',
            );
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
          const refusal =
            'db clean removes history for good: pass --yes to go ahead (or --dry-run to see what it would remove)';
          if (!(await confirm('Remove them?', refusal))) {
            process.stdout.write('nothing was removed\n');
            return;
          }
        }
        const { removed, stopped } = await watchClean(clients(), req);
        show(
          { counts: removed, dryRun: false, stopped },
          stopped
            ? 'stopped (Ctrl-C) after the batch under way: the rows above were removed, the rest is kept; ' +
                'the same command goes on'
            : 'removed',
        );
        if (stopped) process.exitCode = 130;
      },
    );
}
