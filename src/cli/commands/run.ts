import type { Command } from 'commander';
import { groupMapped, mappedSummary } from '../group-mapped.js';
import { timestampDate } from '@bufbuild/protobuf/wkt';
import { RunState, type Run, type TaskInstance } from '../../gen/leoflow/v1/types_pb.js';
import type { Clients } from '../client.js';
import { formatElapsed, isoTime, runStateName, table, taskStateName, time } from '../format.js';
import { paintState } from '../paint-state.js';
import { parseRunStates, RUN_STATE_NAMES } from '../parse-run-states.js';
import { followRun } from '../follow-run.js';
import { watchRunLines } from '../watch-run-lines.js';
import { integerArgument, runIdArgument, seqArgument } from '../integer-argument.js';
import { runJson } from '../run-json.js';
import { countByState, readRunPages } from '../run-pages.js';

const ENDED = new Set([RunState.SUCCESS, RunState.FAILED, RunState.CANCELLED]);

/** The table's rows: a mapped task's instances as one row, with their counts by state. */
function tiRows(tis: TaskInstance[]): string[][] {
  const own = new Map(tis.map((t) => [t.taskId, t]));
  return groupMapped(tis, (t) => taskStateName(t.state)).map((g) => {
    if (g.kind === 'one') return tiRow(g.ti);
    const m = mappedSummary(g, own.get(g.task));
    return [m.name, m.states, '', '', '', '', '', '', ''];
  });
}

function tiRow(t: TaskInstance): string[] {
  return [
    t.taskId,
    paintState(taskStateName(t.state)),
    `${t.tryNumber}/${t.maxTries}`,
    t.exitCode === undefined ? '-' : String(t.exitCode),
    t.agentId || '-',
    time(t.startedAt),
    time(t.endedAt),
    formatElapsed(t.startedAt, t.endedAt),
    t.pendingReason || t.error || '',
  ];
}

function summary(tis: TaskInstance[]): string {
  return [...countByState(tis, (t) => taskStateName(t.state))].map(([s, n]) => `${n} ${s}`).join(', ');
}

export function registerRun(program: Command, clients: () => Clients): void {
  const run = program.command('run').description('trigger and inspect DAG runs');

  run
    .command('trigger')
    .description('start a run of a DAG')
    .argument('<dag_id>')
    .option('--conf <json>', 'JSON object passed to the tasks as LEOFLOW_RUN_CONF')
    .option('--key <run_key>', 'idempotency key: triggering again with it returns the same run')
    .option('-w, --wait', 'follow the run until it ends; exit non-zero unless it succeeds')
    .option('--no-cache', 'run the tasks that have cache: instead of reusing an earlier result')
    .option('-o, --output <format>', 'text | json', 'text')
    .action(
      async (dagId: string, opts: { conf?: string; key?: string; wait?: boolean; cache: boolean; output: string }) => {
        const c = clients();
        const res = await c.workflow.triggerRun({
          dagId,
          confJson: opts.conf ?? '',
          runKey: opts.key ?? '',
          noCache: !opts.cache,
        });
        const r = res.run!;
        if (opts.output === 'json' && !opts.wait) {
          process.stdout.write(
            JSON.stringify({
              run_id: r.runId,
              dag_id: r.dagId,
              run_key: r.runKey,
              state: runStateName(r.state),
              created: res.created,
            }) + '\n',
          );
          return;
        }
        process.stdout.write(
          `run ${r.runId} of ${r.dagId} ${res.created ? 'triggered' : 'already exists'} (key ${r.runKey})\n`,
        );
        if (!opts.wait) return;
        const started = Date.now();
        // At a terminal, the live view of `run watch`; elsewhere (a log, CI), a line per move.
        const live = process.stdout.isTTY && opts.output !== 'json';
        const end = live
          ? await (await import('../watch-run-live.js')).watchRunLive(c, r.runId)
          : await watchRunLines(c, r);
        const state = live ? paintState(runStateName(end.run.state)) : runStateName(end.run.state);
        const secs = ((Date.now() - started) / 1000).toFixed(1);
        process.stdout.write(`run ${r.runId} ${state} in ${secs}s: ${summary(end.tis)}\n`);
        if (end.run.state !== RunState.SUCCESS) process.exitCode = 1;
      },
    );

  run
    .command('list')
    .description('list recent runs')
    .option('--dag <dag_id>', 'only this DAG')
    .option(
      '--state <state>',
      `only runs in this state, or any of several comma-separated: ${RUN_STATE_NAMES.join(', ')}`,
    )
    .option('--limit <n>', 'at most this many', '20')
    .option('-o, --output <format>', 'table | json', 'table')
    .action(async (opts: { dag?: string; state?: string; limit: string; output: string }) => {
      const limit = Number(opts.limit);
      if (!Number.isInteger(limit) || limit < 1 || limit > 1000)
        throw new Error(`--limit must be an integer from 1 to 1000, got ${JSON.stringify(opts.limit)}`);
      const states = opts.state === undefined ? [] : parseRunStates(opts.state);
      // A page stops at 3 MiB (runs with large confs): the next pages fill up to --limit.
      const runs = [];
      let pageToken = '';
      do {
        const page = await clients().workflow.listRuns({
          dagId: opts.dag ?? '',
          states,
          limit: limit - runs.length,
          pageToken,
        });
        runs.push(...page.runs);
        pageToken = page.nextPageToken;
      } while (pageToken && runs.length < limit);
      if (opts.output === 'json') {
        process.stdout.write(
          JSON.stringify(
            runs.map((r) => ({
              run_id: r.runId,
              dag_id: r.dagId,
              run_key: r.runKey,
              run_type: r.runType,
              state: runStateName(r.state),
              created_at: isoTime(r.createdAt),
              started_at: isoTime(r.startedAt),
              ended_at: isoTime(r.endedAt),
            })),
          ) + '\n',
        );
        return;
      }
      process.stdout.write(
        table(
          ['RUN', 'DAG', 'STATE', 'TYPE', 'CREATED', 'DURATION', 'KEY'],
          runs.map((r) => [
            r.runId,
            r.dagId,
            paintState(runStateName(r.state)),
            r.runType,
            time(r.createdAt),
            formatElapsed(r.startedAt, r.endedAt),
            r.runKey,
          ]),
        ) + '\n',
      );
    });

  run
    .command('show')
    .description('show a run and its task instances, with why each waiting task waits')
    .argument('<run_id>', 'the run (see `leoflow run list`)', runIdArgument)
    .option('-o, --output <format>', 'table | json', 'table')
    .action(async (runId: string, opts: { output: string }) => {
      // JSON lists every task instance; the table counts a mapped task's instances in one row.
      const res = await readRunPages(clients(), runId, { all: opts.output === 'json' });
      const r = res.run;
      if (opts.output === 'json') {
        process.stdout.write(JSON.stringify(runJson(r, res.tis)) + '\n');
        return;
      }
      process.stdout.write(
        `run ${r.runId} of ${r.dagId} (${r.runType}, key ${r.runKey}, DAG version ${r.dagVersion})\n` +
          `state ${paintState(runStateName(r.state))}, created ${time(r.createdAt)}, ` +
          `duration ${formatElapsed(r.startedAt, r.endedAt)}\n` +
          (r.triggeredBy ? `triggered by ${r.triggeredBy.id} from ${r.triggeredBy.peer}\n` : '') +
          (r.traceparent ? `traceparent ${r.traceparent}\n` : '') +
          (r.deadlineAt ? `deadline ${time(r.deadlineAt)}: ${paintState(r.deadlineState || 'not due yet')}\n` : '') +
          '\n' +
          table(
            ['TASK', 'STATE', 'TRY', 'EXIT', 'AGENT', 'STARTED', 'ENDED', 'DURATION', 'REASON / ERROR'],
            tiRows(res.tis),
          ) +
          '\n' +
          taskDeadlines(res.tis),
      );
    });

  run
    .command('watch')
    .description('follow a run live until it ends: a redrawn view in a terminal, one line per move otherwise')
    .argument('<run_id>', 'the run (see `leoflow run list`)', runIdArgument)
    .option('--after <seq>', 'only events after this seq (to resume a watch)', seqArgument, '0')
    .option('-f, --follow', 'keep watching after the run ends (a cleared task starts it again)')
    .option('-o, --output <format>', 'text | json (one event per line)', 'text')
    .action(async (runId: string, opts: { after: string; follow?: boolean; output: string }) => {
      const c = clients();
      const ac = new AbortController();
      process.once('SIGINT', () => ac.abort());
      if (opts.output === 'json') {
        for await (const batch of followRun(c, runId, {
          afterSeq: opts.after,
          follow: opts.follow,
          signal: ac.signal,
        })) {
          for (const e of batch) {
            process.stdout.write(
              JSON.stringify({
                seq: e.seq,
                run_id: e.runId,
                ti_id: e.tiId === '0' ? null : e.tiId,
                dag_id: e.dagId,
                kind: e.kind,
                at: e.at ? timestampDate(e.at).toISOString() : null,
                ...JSON.parse(e.payloadJson),
              }) + '\n',
            );
          }
        }
        return;
      }
      const first = await c.workflow.getRun({ runId });
      if (!process.stdout.isTTY) {
        process.stdout.write(`run ${runId} of ${first.run!.dagId}: ${runStateName(first.run!.state)}\n`);
        const end = await watchRunLines(c, first.run!, {
          afterSeq: opts.after,
          follow: opts.follow,
          signal: ac.signal,
        });
        const took = ENDED.has(end.run.state) ? ` in ${formatElapsed(end.run.startedAt, end.run.endedAt)}` : '';
        process.stdout.write(`run ${runId} ${runStateName(end.run.state)}${took}: ${summary(end.tis)}\n`);
        if (end.run.state !== RunState.SUCCESS) process.exitCode = 1;
        return;
      }
      // Loaded here: only a terminal's view needs log-update.
      const { watchRunLive } = await import('../watch-run-live.js');
      const end = await watchRunLive(c, runId, { afterSeq: opts.after, follow: opts.follow, signal: ac.signal, first });
      if (end.run.state !== RunState.SUCCESS) process.exitCode = 1;
    });

  run
    .command('cancel')
    .description('cancel a run (running tasks are stopped, waiting ones will not start), or with --task one task of it')
    .argument('<run_id>', 'the run (see `leoflow run list`)', runIdArgument)
    .option('--task <task_id>', 'cancel only this task: the run goes on by its trigger rules')
    .action(async (runId: string, opts: { task?: string }) => {
      if (opts.task !== undefined) {
        const res = await clients().workflow.cancelTaskInstance({ runId, taskId: opts.task });
        const ti = res.taskInstance!;
        process.stdout.write(`task ${ti.taskId} of run ${ti.runId} ${taskStateName(ti.state)}\n`);
        return;
      }
      const res = await clients().workflow.cancelRun({ runId });
      process.stdout.write(`run ${res.run!.runId} ${runStateName(res.run!.state)}\n`);
    });

  run
    .command('clear')
    .description('retry a task that has ended: it runs again as its next try, with its retries granted afresh')
    .argument('<run_id>', 'the run (see `leoflow run list`)', runIdArgument)
    .argument('<task_id>')
    .option('--downstream', 'also clear every ended task downstream of it')
    .option('--no-cache', 'the cleared tasks that have cache: run instead of reusing an earlier result')
    .option('-o, --output <format>', 'text | json', 'text')
    .action(async (runId: string, taskId: string, opts: { downstream?: boolean; cache: boolean; output: string }) => {
      const res = await clients().workflow.clearTaskInstance({
        runId,
        taskId,
        downstream: opts.downstream ?? false,
        noCache: !opts.cache,
      });
      const r = res.run!;
      if (opts.output === 'json') {
        process.stdout.write(
          JSON.stringify({
            run_id: r.runId,
            state: runStateName(r.state),
            cleared: res.cleared.map((t) => ({ task_id: t.taskId, try_number: t.tryNumber, max_tries: t.maxTries })),
          }) + '\n',
        );
        return;
      }
      const others = res.cleared.filter((t) => t.taskId !== taskId).length;
      const also = opts.downstream ? ` (and ${others} downstream)` : '';
      process.stdout.write(`cleared ${taskId}${also} in run ${r.runId}; run ${r.runId} is ${runStateName(r.state)}\n`);
    });

  run
    .command('approve')
    .description('approve (or with --reject, reject) a task that waits for an approval: it succeeds (or fails) at once')
    .argument('<run_id>', 'the run (see `leoflow run list`)', runIdArgument)
    .argument('<task_id>', 'the approval task (its state is waiting)')
    .option('--reject', 'reject it: the task fails')
    .option('--note <text>', "why, recorded with who and when in the run's events")
    .action(async (runId: string, taskId: string, opts: { reject?: boolean; note?: string }) => {
      const res = await clients().workflow.approveTask({
        runId,
        taskId,
        reject: opts.reject ?? false,
        note: opts.note ?? '',
      });
      const ti = res.taskInstance;
      const verdict = opts.reject ? 'rejected' : 'approved';
      process.stdout.write(`${verdict} task ${taskId} of run ${runId}${ti ? `: ${taskStateName(ti.state)}` : ''}\n`);
    });

  run
    .command('output')
    .description("print a task's output (the JSON it wrote to $LEOFLOW_OUTPUT): its latest try's, or one try's")
    .argument('<run_id>', 'the run (see `leoflow run list`)', runIdArgument)
    .argument('<task_id>')
    .option('--try <n>', 'the output of this try', integerArgument('A try number', 1, 2_147_483_647))
    .option('--all', "every try's output, one JSON line each: {try_number, size_bytes, output}")
    .action(async (runId: string, taskId: string, opts: { try?: number; all?: boolean }) => {
      const res = await clients().workflow.getTaskOutput({ runId, taskId, tryNumber: opts.try ?? 0 });
      if (opts.all) {
        for (const o of res.outputs) {
          process.stdout.write(`{"try_number":${o.tryNumber},"size_bytes":${o.sizeBytes},"output":${o.json}}\n`);
        }
        return;
      }
      const latest = res.outputs[0];
      if (!latest) {
        const which = opts.try !== undefined ? `try ${opts.try} of ` : '';
        process.stderr.write(`${which}task ${taskId} of run ${runId} stored no output\n`);
        process.exitCode = 1;
        return;
      }
      process.stdout.write(`${latest.json}\n`);
    });
}

/** The task deadlines of a run (`deadline:` on a task), one line each, after the task table. */
function taskDeadlines(tis: readonly TaskInstance[]): string {
  return tis
    .filter((t) => t.deadlineAt)
    .map((t) => `task ${t.taskId} deadline ${time(t.deadlineAt)}: ${paintState(t.deadlineState || 'not due yet')}\n`)
    .join('');
}
