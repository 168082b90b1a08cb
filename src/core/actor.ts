/**
 * Who asked for a write through the API: the id of the API token the call carried (`local` when
 * the API runs open on loopback, `anonymous` when it runs open elsewhere with --insecure) and the
 * address the call came from. Written with the write's events and its log line, so "who
 * cancelled this run" has an answer.
 */
export interface WriteActor {
  id: string;
  /** `host:port` of the caller's connection, as the server saw it. */
  peer: string;
}

/** The actor's keys as a write's event payload carries them (`actor`, `peer`); empty without one. */
export function actorPayload(by: WriteActor | undefined): { actor?: string; peer?: string } {
  return by ? { actor: by.id, peer: by.peer } : {};
}
