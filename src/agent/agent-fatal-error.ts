import { status } from '@grpc/grpc-js';

/**
 * Statuses that refuse the agent at Hello for a reason a retry cannot fix (a protocol version
 * the control plane does not speak, a bad Hello, a wrong token, no AgentService at that
 * address): the agent stops instead of reconnecting forever.
 */
export const FATAL_AT_HELLO: ReadonlySet<number> = new Set([
  status.INVALID_ARGUMENT,
  status.PERMISSION_DENIED,
  status.FAILED_PRECONDITION,
  status.UNAUTHENTICATED,
  status.UNIMPLEMENTED,
]);

/** The control plane refused this agent; the message is the server's. */
export class AgentFatalError extends Error {
  /** The gRPC status code, e.g. 9 (FAILED_PRECONDITION). */
  readonly code: number;
  constructor(code: number, serverMessage: string) {
    super(`control plane refused the agent: ${codeName(code)}: ${serverMessage}`);
    this.name = 'AgentFatalError';
    this.code = code;
  }
}

/** 9 → "FAILED_PRECONDITION". */
export function codeName(code: number): string {
  return (status as unknown as Record<number, string>)[code] ?? `code ${code}`;
}
