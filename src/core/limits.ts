/**
 * The limits every input is held to, before any work is done with it. Each is far above what a
 * real client sends and far below what would hurt another client: a value past one is refused
 * with an error naming the field and the limit (or, for a task's output, cut with a marker).
 */
export const LIMITS = {
  /**
   * A whole API message: ApplyDag's source (1 MiB) with room to spare; gRPC clients' default receive limit is
   * 4 MiB.
   */
  requestBytes: 4 * 1024 * 1024,
  /**
   * A run's conf: it is exported to every task as an environment variable, and an environment past ~128 KiB
   * fails exec with E2BIG.
   */
  confBytes: 64 * 1024,
  /**
   * Nesting of a run's conf: deep enough for any real configuration, shallow enough for every JSON parser on
   * the way.
   */
  confDepth: 32,
  /** A DAG, task or agent id, a run key or any other name given in a request. */
  idChars: 256,
  /** Any other string of an API request (a description, a file name): bounded all the same. */
  stringChars: 4096,
  /** A whole error message: a status travels in an HTTP/2 header, where a huge one resets the stream. */
  errorMessageChars: 7 * 1024,
  /**
   * A value quoted back in an error message: messages travel in HTTP/2 headers (grpc-message), where a long
   * one resets the stream.
   */
  echoChars: 120,
  /** The errors of one DAG file listed in full: after them, "and N more". */
  dagErrors: 50,
  /** One of those errors, as shown (a value it quotes is cut). */
  dagErrorChars: 500,
  /** An agent's labels and capabilities: counts, and sizes (Kubernetes' own label rules are 63/63 characters). */
  labels: 64,
  labelKeyChars: 128,
  labelValueChars: 256,
  capabilities: 64,
  capabilityChars: 128,
  /** One line of a task's output as stored: longer lines are cut, with a marker saying how much was dropped. */
  logLineChars: 64 * 1024,
  /** Entries in one Log message of an agent. */
  logEntries: 1000,
  /** Lines stored of one attempt's output: past it one line says so, and the rest is dropped. */
  attemptLogLines: 100_000,
} as const;
