import { FeedClosedError, WatcherBehindError } from '../../feed/event-feed.js';
import { Code, ConnectError } from '@connectrpc/connect';
import { echo } from '../../core/check-text.js';
import { LIMITS } from '../../core/limits.js';
import { DagValidationError } from '../../core/dag-spec.js';
import { DagParserError } from '../dags/dag-parser.js';

/** The request names something that does not exist. */
export class NotFoundError extends Error {
  override readonly name = 'NotFoundError';
}

/** A field of the request is malformed. `field` is its proto name. */
export class InvalidArgumentError extends Error {
  override readonly name = 'InvalidArgumentError';
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(`${field}: ${message}`);
  }
}

/** The request is well-formed but the target is in a state that does not allow it. */
export class FailedPreconditionError extends Error {
  override readonly name = 'FailedPreconditionError';
}

/** The caller's token may call the RPC, but not for this target (an approval asking a higher role). */
export class PermissionDeniedError extends Error {
  override readonly name = 'PermissionDeniedError';
}

/**
 * The one place internal errors become wire errors. Anything unexpected is logged by the caller
 * and surfaces as INTERNAL without leaking internals beyond its message.
 */
export function toConnectError(err: unknown): ConnectError {
  const ce = wireError(err);
  // A status travels in a header: a huge message would reset the stream instead of arriving.
  if (ce.rawMessage.length <= LIMITS.errorMessageChars) return ce;
  return new ConnectError(
    `${ce.rawMessage.slice(0, LIMITS.errorMessageChars)}… (message cut at ${LIMITS.errorMessageChars} characters)`,
    ce.code,
  );
}

function wireError(err: unknown): ConnectError {
  if (err instanceof ConnectError) return err;
  if (err instanceof DagValidationError) return new ConnectError(err.message, Code.InvalidArgument);
  if (err instanceof DagParserError) {
    // A file too slow or too big to parse is the file's fault; a busy or closed parser is ours.
    const code = {
      timeout: Code.InvalidArgument,
      memory: Code.InvalidArgument,
      overloaded: Code.ResourceExhausted,
      closed: Code.Unavailable,
      crashed: Code.Internal,
    }[err.reason];
    return new ConnectError(err.message, code);
  }
  if (err instanceof InvalidArgumentError) return new ConnectError(err.message, Code.InvalidArgument);
  if (err instanceof WatcherBehindError) return new ConnectError(err.message, Code.ResourceExhausted);
  if (err instanceof FeedClosedError) return new ConnectError(err.message, Code.Unavailable);
  if (err instanceof NotFoundError) return new ConnectError(err.message, Code.NotFound);
  if (err instanceof FailedPreconditionError) return new ConnectError(err.message, Code.FailedPrecondition);
  if (err instanceof PermissionDeniedError) return new ConnectError(err.message, Code.PermissionDenied);
  return new ConnectError(err instanceof Error ? err.message : String(err), Code.Internal);
}

/** Parses an int64 id given as a decimal string; names the field when it is not one. */
export function parseId(field: string, value: string): string {
  if (!/^[1-9]\d{0,18}$/.test(value)) {
    throw new InvalidArgumentError(
      field,
      value === '' || value === '0' ? 'is required' : `must be a positive integer id, got ${echo(value)}`,
    );
  }
  return value;
}

/** A name the request must give. Its length and characters were checked with every string of the
 *  request, before the handler (check-request-fields.ts). */
export function required(field: string, value: string): string {
  if (value.trim() === '') throw new InvalidArgumentError(field, 'is required');
  return value;
}
