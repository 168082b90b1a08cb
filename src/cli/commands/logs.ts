import type { Command } from 'commander';
import type { Clients } from '../client.js';
import { integerArgument, runIdArgument } from '../integer-argument.js';
import { isoTime } from '../format.js';
import type { LogLine } from '../../gen/leoflow/v1/types_pb.js';

/** One log line as `logs -o json` prints it: one object a line, `at` when the line was written (ISO 8601 UTC). */
function lineJson(l: LogLine) {
  return {
    task: l.taskId,
    try: l.tryNumber,
    stream: l.stream,
    at: isoTime(l.at),
    line: l.line,
    ti_id: l.tiId,
    seq: l.seq,
  };
}

/** One log line as text: `[task #try]` for stdout, with its stream otherwise, after its time with --timestamps. */
function lineText(l: LogLine, timestamps: boolean): string {
  const tag = l.stream === 'stdout' ? '' : l.stream === 'stderr' ? ' stderr' : ' leoflow';
  const at = timestamps ? `${isoTime(l.at) ?? '-'} ` : '';
  return `${at}[${l.taskId} #${l.tryNumber}${tag}] ${l.line}`;
}

export function registerLogs(program: Command, clients: () => Clients): void {
  program
    .command('logs')
    .description("print the log lines of a run's tasks")
    .argument('<run_id>', 'the run (see `leoflow run list`)', runIdArgument)
    .option('-t, --task <task_id>', 'only this task')
    .option(
      '--try <n>',
      'only this attempt, 1 for the first (default: all)',
      integerArgument('A try number', 1, 2147483647),
    )
    .option('-f, --follow', 'keep printing until the tasks end')
    .option('--timestamps', 'start each line with the time it was written (ISO 8601, UTC)')
    .option('-o, --output <format>', 'text | json (one object a line: task, try, stream, at, line, ti_id, seq)', 'text')
    .action(
      async (
        runId: string,
        opts: { task?: string; try?: number; follow?: boolean; timestamps?: boolean; output: string },
      ) => {
        const tryNumber = opts.try ?? 0;
        if (opts.output !== 'text' && opts.output !== 'json')
          throw new Error(`-o/--output must be text or json, got ${JSON.stringify(opts.output)}`);
        const json = opts.output === 'json';
        const stream = clients().workflow.tailLogs({
          runId,
          taskId: opts.task ?? '',
          tryNumber,
          follow: opts.follow ?? false,
        });
        for await (const chunk of stream) {
          for (const l of chunk.lines)
            process.stdout.write((json ? JSON.stringify(lineJson(l)) : lineText(l, opts.timestamps ?? false)) + '\n');
        }
      },
    );
}
