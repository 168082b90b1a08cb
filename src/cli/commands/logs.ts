import type { Command } from 'commander';
import type { Clients } from '../client.js';

export function registerLogs(program: Command, clients: () => Clients): void {
  program
    .command('logs')
    .description("print the log lines of a run's tasks")
    .argument('<run_id>')
    .option('-t, --task <task_id>', 'only this task')
    .option('--try <n>', 'only this attempt (default: all)')
    .option('-f, --follow', 'keep printing until the tasks end')
    .action(async (runId: string, opts: { task?: string; try?: string; follow?: boolean }) => {
      const tryNumber = opts.try === undefined ? 0 : Number(opts.try);
      if (!Number.isInteger(tryNumber) || tryNumber < 0) throw new Error(`--try must be a positive integer, got ${JSON.stringify(opts.try)}`);
      const stream = clients().workflow.tailLogs({ runId, taskId: opts.task ?? '', tryNumber, follow: opts.follow ?? false });
      for await (const chunk of stream) {
        for (const l of chunk.lines) {
          const tag = l.stream === 'stdout' ? '' : l.stream === 'stderr' ? ' stderr' : ' leoflow';
          process.stdout.write(`[${l.taskId} #${l.tryNumber}${tag}] ${l.line}\n`);
        }
      }
    });
}
