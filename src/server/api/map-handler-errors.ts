import { Code, ConnectError } from '@connectrpc/connect';
import type { Logger } from 'pino';
import { toConnectError } from './errors.js';

/**
 * Wraps each handler of a service so every error leaves through the one mapping
 * (`toConnectError`), and unexpected ones (INTERNAL) are logged with their stack. An error that
 * arrives after the client cancelled the call (a reset stream's write, a read cut short) is the
 * cancel's echo, not a fault: it is noted at debug and ends the call as CANCELED.
 */
export function mapHandlerErrors<T extends object>(logger: Logger, impl: T): T {
  const out: Record<string, unknown> = {};
  for (const [name, fn] of Object.entries(impl) as [string, (...a: unknown[]) => unknown][]) {
    const fail = (err: unknown, signal: AbortSignal | undefined): never => {
      if (signal?.aborted && !(err instanceof ConnectError && err.code !== Code.Canceled)) {
        logger.debug(
          { rpc: name, why: err instanceof Error ? err.message : String(err) },
          'call cancelled by its client',
        );
        throw new ConnectError('the call was cancelled by its client', Code.Canceled);
      }
      const ce = toConnectError(err);
      if (ce.code === 13) logger.error({ err, rpc: name }, 'rpc failed');
      throw ce;
    };
    out[name] =
      fn.constructor.name === 'AsyncGeneratorFunction'
        ? async function* (...args: unknown[]) {
            try {
              yield* fn(...args) as AsyncGenerator;
            } catch (err) {
              fail(err, signalOf(args[1]));
            }
          }
        : async (...args: unknown[]) => {
            try {
              return await fn(...args);
            } catch (err) {
              fail(err, signalOf(args[1]));
            }
          };
  }
  return out as T;
}

/** The call's abort signal, from a handler's context argument. */
function signalOf(context: unknown): AbortSignal | undefined {
  const s = (context as { signal?: unknown } | undefined)?.signal;
  return s instanceof AbortSignal ? s : undefined;
}
