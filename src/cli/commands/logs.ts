import type { Command } from 'commander';
import type { Clients } from '../client.js';
import { integerArgument, runIdArgument } from '../integer-argument.js';

export function registerLogs(program: Command, clients: () => Clients): void {
  program
    .command('logs')
    .description("print the log lines of a run's tasks")
    .argument('<run_id>', 'the run (see `leoflow run list`)', runIdArgument)
    .option('-t, --task <task_id>', 'only this task')
    .option('--try <n>', 'only this attempt, 1 for the first (default: all)', integerArgument('A try number', 1, 2147483647))
    .option('-f, --follow', 'keep printing until the tasks end')
    .action(async (runId: string, opts: { task?: string; try?: number; follow?: boolean }) => {
      const stream = clients().workflow.tailLogs({ runId, taskId: opts.task ?? '', tryNumber: opts.try ?? 0, follow: opts.follow ?? false });
      for await (const chunk of stream) {
        for (const l of chunk.lines) {
          const tag = l.stream === 'stdout' ? '' : l.stream === 'stderr' ? ' stderr' : ' leoflow';
          process.stdout.write(`[${l.taskId} #${l.tryNumber}${tag}] ${l.line}\n`);
        }
      }
    });
}
