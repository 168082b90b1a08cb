import type { Command } from 'commander';
import { runStateName } from '../format.js';
import type { Clients } from '../client.js';

export function registerEvent(program: Command, clients: () => Clients): void {
  const event = program.command('event').description('send events in: each DAG they trigger starts a run');

  event
    .command('send')
    .description("send an event: each DAG with a matching trigger starts a run, the payload as the run's conf")
    .argument('<name>')
    .option('--payload <json>', 'the JSON object the event carries (its runs get it as LEOFLOW_RUN_CONF)')
    .option('--key <event_key>', "the sender's id of the event: sending again with it starts nothing twice")
    .option('-o, --output <format>', 'text | json', 'text')
    .action(async (name: string, opts: { payload?: string; key?: string; output: string }) => {
      const res = await clients().workflow.sendEvent({
        name,
        payloadJson: opts.payload ?? '',
        eventKey: opts.key ?? '',
      });
      if (opts.output === 'json') {
        process.stdout.write(
          JSON.stringify({
            event_id: res.eventId,
            duplicate: res.duplicate,
            runs: res.runs.map((r) => ({ run_id: r.runId, dag_id: r.dagId, state: runStateName(r.state) })),
            waits_ended: res.waitsEnded,
          }) + '\n',
        );
        return;
      }
      const what = res.duplicate
        ? `event ${res.eventId} was sent before with this key: nothing started now`
        : `event ${res.eventId} sent`;
      const runs = res.runs.map((r) => `run ${r.runId} of ${r.dagId}`);
      const waits =
        res.waitsEnded > 0 ? `; ended ${res.waitsEnded} waiting task${res.waitsEnded === 1 ? '' : 's'}` : '';
      process.stdout.write(`${what}; ${runs.length === 0 ? 'no DAG triggered' : runs.join(', ')}${waits}\n`);
    });
}
