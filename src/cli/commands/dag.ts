import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type { Command } from 'commander';
import { expandDagPaths } from '../../core/expand-dag-paths.js';
import type { TaskSpec } from '../../gen/leoflow/v1/types_pb.js';
import type { Clients } from '../client.js';
import { confirm } from '../confirm.js';
import { drawDag } from '../draw-dag.js';
import { secretRefJson, taskEnvLines } from '../task-env-lines.js';
import { table, time } from '../format.js';
import { countsJson } from './db.js';

export function registerDag(program: Command, clients: () => Clients): void {
  const dag = program.command('dag').description('apply and inspect DAGs');

  dag
    .command('apply')
    .description('validate DAG files (or folders of them) and store them')
    .argument('<paths...>', 'YAML or JSON DAG files, or folders')
    .action(async (paths: string[]) => {
      const files = await expandDagPaths(paths.map((p) => path.resolve(p)));
      if (files.length === 0) throw new Error(`no DAG files (*.yaml, *.yml, *.json) in ${paths.join(', ')}`);
      let failed = 0;
      for (const file of files) {
        const source = await readFile(file, 'utf8');
        const rel = path.relative(process.cwd(), file) || file;
        try {
          const res = await clients().workflow.applyDag({ source, filename: rel });
          process.stdout.write(
            `${rel}: DAG ${res.dag!.dagId} ${res.outcome} (version ${res.dag!.version}, ` +
              `${res.dag!.tasks.length} tasks)\n`,
          );
        } catch (err) {
          failed++;
          process.stderr.write(`${(err as Error).message.replace(/^\[invalid_argument\] /, '')}\n`);
        }
      }
      if (failed > 0) process.exitCode = 1;
    });

  dag
    .command('list')
    .description('list DAGs')
    .option('-o, --output <format>', 'table | json', 'table')
    .action(async (opts: { output: string }) => {
      const { dags } = await clients().workflow.listDags({});
      if (opts.output === 'json') {
        process.stdout.write(
          JSON.stringify(
            dags.map((d) => ({
              dag_id: d.dagId,
              version: d.version,
              schedule: d.schedule,
              paused: d.paused,
              tasks: d.tasks.length,
            })),
          ) + '\n',
        );
        return;
      }
      process.stdout.write(
        table(
          ['DAG', 'VERSION', 'TASKS', 'SCHEDULE', 'PAUSED', 'NEXT RUN'],
          dags.map((d) => [
            d.dagId,
            String(d.version),
            String(d.tasks.length),
            d.schedule || '-',
            d.paused ? 'yes' : 'no',
            time(d.nextRunAt),
          ]),
        ) + '\n',
      );
    });

  dag
    .command('show')
    .description('show a DAG and its tasks (secret variables by reference: Leoflow never holds their values)')
    .argument('<dag_id>')
    .option('-o, --output <format>', 'text | json', 'text')
    .action(async (dagId: string, opts: { output: string }) => {
      const d = (await clients().workflow.getDag({ dagId })).dag!;
      if (opts.output === 'json') {
        const tasks = d.tasks.map((t) => ({
          id: t.id,
          command: t.command,
          ...(t.waitEvent
            ? { wait: { event: t.waitEvent, match: t.waitMatchJson ? JSON.parse(t.waitMatchJson) : null } }
            : {}),
          ...(t.approvalRole ? { approval: { role: t.approvalRole, message: t.approvalMessage } } : {}),
          depends_on: t.dependsOn,
          executor: t.executor,
          env: t.env,
          secret_env: Object.fromEntries(Object.entries(t.secretEnv).map(([k, r]) => [k, secretRefJson(r.source)])),
        }));
        process.stdout.write(
          JSON.stringify({ dag_id: d.dagId, version: d.version, schedule: d.schedule, paused: d.paused, tasks }) + '\n',
        );
        return;
      }
      const lines = [
        `DAG ${d.dagId}, version ${d.version}, schedule ${d.schedule || '-'}, paused ${d.paused ? 'yes' : 'no'}, ` +
          `next run ${time(d.nextRunAt)}`,
      ];
      if (d.description) lines.push(d.description);
      lines.push('', drawDag(d.tasks));
      lines.push(
        '',
        table(
          ['TASK', 'EXECUTOR', 'DEPENDS ON', 'COMMAND'],
          d.tasks.map((t) => [t.id, t.executor, t.dependsOn.join(',') || '-', commandOrWait(t)]),
        ),
      );
      for (const t of d.tasks) {
        const env = taskEnvLines(t);
        if (env.length > 0) lines.push('', `env of ${t.id}:`, ...env.map((l) => `  ${l}`));
      }
      process.stdout.write(lines.join('\n') + '\n');
    });

  for (const [name, paused] of [
    ['pause', true],
    ['unpause', false],
  ] as const) {
    dag
      .command(name)
      .description(paused ? 'stop creating scheduled runs of a DAG' : 'resume creating scheduled runs of a DAG')
      .argument('<dag_id>')
      .action(async (dagId: string) => {
        const res = await clients().workflow.pauseDag({ dagId, paused });
        process.stdout.write(`DAG ${res.dag!.dagId} ${paused ? 'paused' : 'unpaused'}\n`);
      });
  }

  dag
    .command('delete')
    .description('delete a DAG and all its history: runs, task instances, events, logs')
    .argument('<dag_id>')
    .option(
      '--force',
      'cancel its runs that have not ended (stopping their tasks), then delete; without it such runs refuse the delete',
    )
    .option('-y, --yes', 'do not ask for confirmation')
    .option('-o, --output <format>', 'text | json', 'text')
    .action(async (dagId: string, opts: { force?: boolean; yes?: boolean; output: string }) => {
      if (!opts.yes) {
        const refusal = `dag delete removes DAG ${dagId} and all its history for good: pass --yes to go ahead`;
        if (!(await confirm(`Delete DAG ${dagId} with all its runs, task instances, events and logs?`, refusal))) {
          process.stdout.write('nothing was deleted\n');
          return;
        }
      }
      const res = await clients().workflow.deleteDag({ dagId, force: opts.force ?? false });
      if (opts.output === 'json') {
        process.stdout.write(
          JSON.stringify({
            dag_id: dagId,
            removed: countsJson(res.removed),
            cancelled_run_ids: res.cancelledRunIds,
            dag_files: res.dagFiles,
          }) + '\n',
        );
        return;
      }
      const c = countsJson(res.removed);
      const n = (count: number | undefined, one: string, many: string) => `${count ?? 0} ${count === 1 ? one : many}`;
      let out =
        `DAG ${dagId} deleted: ${n(c.dag_runs, 'run', 'runs')}, ` +
        `${n(c.task_instances, 'task instance', 'task instances')}, ` +
        `${n(c.events, 'event', 'events')} and ${n(c.task_logs, 'log line', 'log lines')} removed\n`;
      if (res.cancelledRunIds.length > 0)
        out +=
          `cancelled first (they had not ended): ` +
          `run${res.cancelledRunIds.length === 1 ? '' : 's'} ${res.cancelledRunIds.join(', ')}\n`;
      for (const file of res.dagFiles) {
        out +=
          `note: ${file} defines DAG ${dagId} and is among the server's --dags: ` +
          `the server applies it again at its next start (with no history); remove the file to keep the DAG deleted\n`;
      }
      process.stdout.write(out);
    });
}

/** A task's COMMAND column: its argv, or what a wait or an approval task waits for. */
function commandOrWait(t: TaskSpec): string {
  if (t.waitEvent) return `(wait for event ${t.waitEvent}${t.waitMatchJson ? ` ${t.waitMatchJson}` : ''})`;
  if (t.approvalRole) return `(approval by ${t.approvalRole} or above)`;
  return t.command.join(' ');
}
