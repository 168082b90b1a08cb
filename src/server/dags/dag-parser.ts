import { Piscina } from 'piscina';

import { DagValidationError, type DagSpec } from '../../core/dag-spec.js';
import { checkDagSourceSize } from '../../core/dag/check-dag-source-size.js';
import { controlPlaneNamespaceIssues } from '../../core/dag/check-control-plane-namespace.js';
import { defaultExecutorIssues } from '../../core/dag/check-secret-executor.js';
import type { ParseDagInput, ParseDagResult } from './parse-dag-worker.js';

/** Options of {@link createDagParser}. */
export interface DagParserOptions {
  /** Worker threads; default 2 (DAG files are applied rarely, but one slow file must not block the next). */
  maxThreads?: number;
  /** Per-parse time limit in ms, queueing included; default 10,000 (a valid 1 MiB file takes ~2 s). */
  timeoutMs?: number;
  /** Parses waiting for a thread beyond the running ones; default 64. More are refused. */
  maxQueue?: number;
  /** Errors of idle workers, which no parse is waiting on; default: a process warning. */
  onError?: (err: Error) => void;
  /** The executor of tasks that name none (the edition's); checks what only it can run. Default: not checked. */
  defaultExecutor?: string;
  /** The control plane's own namespace: no task may name it. Default: not checked. */
  controlPlaneNamespace?: string | null | undefined;
}

/** Parses DAG files on worker threads; see {@link createDagParser}. */
export interface DagParser {
  /** Resolves to the spec, or rejects with a `DagValidationError` or a `DagParserError`. */
  parse(source: string, file: string): Promise<DagSpec>;
  /** Refuses new parses, cancels queued ones and stops the threads once running ones end. */
  close(): Promise<void>;
}

export type DagParserErrorReason = 'timeout' | 'memory' | 'overloaded' | 'closed' | 'crashed';

/**
 * A parse that did not produce a verdict on the file. `reason` says why, so the service handler
 * can map it to a status (`overloaded` is worth retrying, `timeout` and `memory` are not).
 */
export class DagParserError extends Error {
  override readonly name = 'DagParserError';
  constructor(
    readonly file: string,
    readonly reason: DagParserErrorReason,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(`${file}: ${message}`, options);
  }
}

/**
 * Old-generation heap of one worker. A valid DAG near the 1 MiB limit needs 64-96 MB while the
 * yaml package builds its document; 256 leaves room to parse it without GC thrash, and still
 * stops a pathological file (say 300,000 one-letter tags) long before it hurts the host.
 */
const WORKER_HEAP_MB = 256;

/**
 * A pool of worker threads that parse untrusted DAG files, each bounded in time (`timeoutMs`,
 * after which the worker is terminated) and memory (`WORKER_HEAP_MB` per worker), so an alias
 * bomb or a pathological 10,000-task file never stalls the event loop.
 *
 * The worker is `parse-dag-worker.js` next to this module, so the pool only works from the
 * compiled `dist/` tree.
 */
export function createDagParser(opts: DagParserOptions = {}): DagParser {
  const maxThreads = opts.maxThreads ?? 2;
  const timeoutMs = opts.timeoutMs ?? 10_000;
  const maxQueue = opts.maxQueue ?? 64;
  if (!Number.isSafeInteger(maxThreads) || maxThreads < 1)
    throw new TypeError('opts.maxThreads must be a positive integer');
  if (!Number.isSafeInteger(timeoutMs) || timeoutMs < 1)
    throw new TypeError('opts.timeoutMs must be a positive integer');
  if (!Number.isSafeInteger(maxQueue) || maxQueue < 0)
    throw new TypeError('opts.maxQueue must be a non-negative integer');

  const pool = new Piscina<ParseDagInput, ParseDagResult>({
    filename: new URL('./parse-dag-worker.js', import.meta.url).href,
    minThreads: 0,
    maxThreads,
    // DAG files come in bursts (start-up, `dag apply`); an idle worker kept alive between them
    // costs every task's spawn ~0.5 ms (fork copies its isolate's mappings too).
    idleTimeout: 1_000,
    resourceLimits: { maxOldGenerationSizeMb: WORKER_HEAP_MB, maxYoungGenerationSizeMb: 32 },
  });
  // Piscina emits 'error' for a worker that dies with no task; unhandled, that would crash us.
  const onError = opts.onError ?? ((err: Error) => process.emitWarning(err));
  pool.on('error', onError);

  // Admission is counted here rather than left to piscina's queue, whose "at limit" error can
  // only be recognised by its message.
  const capacity = maxThreads + maxQueue;
  let inFlight = 0;
  let closed = false;

  async function parse(source: string, file: string): Promise<DagSpec> {
    if (closed) throw new DagParserError(file, 'closed', 'the DAG parser is closed');
    // Refused here so an oversized file is never copied to a worker.
    const sizeIssue = checkDagSourceSize(source);
    if (sizeIssue !== null) throw new DagValidationError(file, [sizeIssue]);
    if (inFlight >= capacity) {
      throw new DagParserError(
        file,
        'overloaded',
        `the DAG parser is busy (${inFlight} parses in flight, limit ${capacity}); try again later`,
      );
    }

    inFlight += 1;
    const signal = AbortSignal.timeout(timeoutMs);
    let result: ParseDagResult;
    try {
      result = await pool.run({ source, file }, { signal });
    } catch (err) {
      if (signal.aborted) {
        throw new DagParserError(file, 'timeout', `the DAG file took longer than ${timeoutMs} ms to parse`, {
          cause: err,
        });
      }
      if (closed)
        throw new DagParserError(file, 'closed', 'the DAG parser was closed during the parse', { cause: err });
      if (isOutOfMemory(err)) {
        throw new DagParserError(
          file,
          'memory',
          `the DAG file needed more than ${WORKER_HEAP_MB} MB of memory to parse`,
          { cause: err },
        );
      }
      throw new DagParserError(file, 'crashed', 'the DAG parser worker failed', { cause: err });
    } finally {
      inFlight -= 1;
    }
    if (result.ok) {
      const issues = [
        ...(opts.defaultExecutor === undefined ? [] : defaultExecutorIssues(result.spec, opts.defaultExecutor)),
        ...(opts.controlPlaneNamespace ? controlPlaneNamespaceIssues(result.spec, opts.controlPlaneNamespace) : []),
      ];
      if (issues.length > 0) throw new DagValidationError(file, issues);
      return result.spec;
    }
    throw new DagValidationError(result.file, result.issues);
  }

  async function close(): Promise<void> {
    if (closed) return;
    closed = true;
    await pool.close({ force: true });
  }

  return { parse, close };
}

function isOutOfMemory(err: unknown): boolean {
  return typeof err === 'object' && err !== null && (err as { code?: unknown }).code === 'ERR_WORKER_OUT_OF_MEMORY';
}
