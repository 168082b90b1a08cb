import { create } from '@bufbuild/protobuf';
import {
  WatchCleanHistoryRequestSchema,
  type CleanHistoryRequest,
  type HistoryCounts,
  type WatchCleanHistoryRequest,
} from '../gen/leoflow/v1/workflow_pb.js';
import type { Clients } from './client.js';

export interface WatchedClean {
  removed: HistoryCounts | undefined;
  /** Ended on Ctrl-C, after the batch under way, with the rest kept. */
  stopped: boolean;
}

/** How often a line of progress is written when no terminal shows a spinner (a log, a CI job). */
const PLAIN_EVERY_MS = 1000;

const of = (done: bigint | undefined, all: bigint | undefined) => `${done ?? 0n} of ${all ?? 0n}`;

/**
 * Runs a clean through WatchCleanHistory and shows how far it got: a line on stderr redrawn in
 * place at a terminal, a plain line at most every second otherwise (stdout stays the result's alone). The
 * first Ctrl-C asks the server to stop after the batch under way and waits for what it removed;
 * a second one leaves at once.
 */
export async function watchClean(
  clients: Clients,
  req: Omit<CleanHistoryRequest, '$typeName' | 'dryRun'>,
): Promise<WatchedClean> {
  let askStop: (stop: boolean) => void = () => undefined;
  const stopAsked = new Promise<boolean>((resolve) => (askStop = resolve));
  async function* requests(): AsyncGenerator<WatchCleanHistoryRequest> {
    yield create(WatchCleanHistoryRequestSchema, { action: { case: 'start', value: { ...req, dryRun: false } } });
    if (await stopAsked) yield create(WatchCleanHistoryRequestSchema, { action: { case: 'stop', value: true } });
  }

  // At a terminal, one line of stderr redrawn in place (carriage return, erase line).
  const spinner = process.stderr.isTTY
    ? {
        set text(t: string) {
          process.stderr.write(`\r\x1b[2K${t}`);
        },
        stop() {
          process.stderr.write('\r\x1b[2K');
        },
      }
    : null;
  if (spinner) spinner.text = 'counting what to remove';
  let interrupted = false;
  const onSigint = () => {
    if (interrupted) process.exit(130);
    interrupted = true;
    askStop(true);
    const text = 'stopping after the batch under way (Ctrl-C again to leave now)';
    if (spinner) spinner.text = text;
    else process.stderr.write(`${text}\n`);
  };
  process.on('SIGINT', onSigint);
  let lastLine = Date.now();
  let result: WatchedClean = { removed: undefined, stopped: false };
  try {
    for await (const res of clients.workflow.watchCleanHistory(requests())) {
      const line =
        `removed ${of(res.removed?.runs, res.expected?.runs)} runs, ` +
        `${of(res.removed?.taskInstances, res.expected?.taskInstances)} task instances`;
      if (res.finished) {
        result = { removed: res.removed, stopped: res.stopped };
        break;
      }
      if (spinner) {
        if (!interrupted) spinner.text = line;
      } else if (Date.now() - lastLine >= PLAIN_EVERY_MS) {
        lastLine = Date.now();
        process.stderr.write(`${line}\n`);
      }
    }
  } finally {
    spinner?.stop();
    askStop(false);
    process.off('SIGINT', onSigint);
  }
  return result;
}
