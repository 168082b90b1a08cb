/**
 * Every bound on what a client or an agent may send, in one place. Each is checked where the
 * input enters (the API's request check, the agent message rules, the DAG parser), before any
 * work is done, and each refusal names the field and the limit.
 */

/** Largest request body the API reads. A DAG source (1 MiB) with room for the envelope; more is
 *  refused before it is decoded, instead of being buffered whole. */
export const MAX_REQUEST_BYTES = 2 * 1024 * 1024;

/** Largest DAG source: the biggest real DAG files are a few hundred KiB. */
export const MAX_DAG_SOURCE_BYTES = 1024 * 1024;

/** Largest run conf. It is exported to every task as an environment variable, and the kernel
 *  refuses an environment past ~128 KiB per string (E2BIG), so the conf must stay well under. */
export const MAX_CONF_JSON_BYTES = 64 * 1024;

/** Deepest nesting of the run conf: deep enough for any real configuration, and far below the
 *  depth at which Postgres' jsonb (or a recursive reader) gives up. */
export const MAX_CONF_JSON_DEPTH = 32;

/** Longest id a request may name (dag, task, run key, agent id, a filter). Ids are printed in
 *  every table and log line; our own rules allow far less (128 or 200), so this bounds only the
 *  garbage before it is echoed or looked up. */
export const MAX_ID_CHARS = 256;

/** Longest other string field of an API request (a file name, a reason). */
export const MAX_STRING_CHARS = 4096;

/** Most labels and capabilities one agent may declare, and the longest key or value of each:
 *  placement reads them for every task, and `agents list` prints them. */
export const MAX_AGENT_LABELS = 64;
export const MAX_AGENT_CAPABILITIES = 64;
export const MAX_LABEL_KEY_CHARS = 128;
export const MAX_LABEL_VALUE_CHARS = 256;
export const MAX_CAPABILITY_CHARS = 128;

/** Longest log line kept: longer lines are cut here and marked, so one runaway line (a minified
 *  bundle, a binary dump) cannot fill the log table or a page of `run logs`. Our own output
 *  reader splits lines at 64 KiB already (line-splitter.ts); this holds any agent to it. */
export const MAX_LOG_LINE_CHARS = 64 * 1024;

/** What a cut log line ends with, so a reader sees that it was cut and by how much. */
export function logLineCutMarker(droppedChars: number): string {
  return ` … [line truncated by leoflow: ${droppedChars} more characters]`;
}

/** Most entries in one Log message. The agent's batcher sends far fewer; more is a broken or
 *  hostile agent, refused before its lines are written. */
export const MAX_LOG_ENTRIES_PER_MESSAGE = 1000;

/** Most issues listed in one DAG error: the rest are counted ("and M more"), so the answer fits
 *  the error message limit below (an issue line can be 300 characters) and a screen. */
export const MAX_DAG_ISSUES_SHOWN = 20;

/** Longest value quoted back in an error message. */
export const MAX_ECHOED_CHARS = 80;

/** Longest error message the API sends: a message is for a human, and a gRPC status travels in a
 *  header, where a huge one resets the stream (grpc-js refuses metadata past 8 KiB by default). */
export const MAX_ERROR_MESSAGE_CHARS = 7 * 1024;

/** A value as an error message quotes it: JSON-quoted and cut short. */
export function echoed(value: unknown): string {
  const s = typeof value === 'bigint' ? value.toString() : JSON.stringify(value) ?? String(value);
  return s.length > MAX_ECHOED_CHARS ? `${s.slice(0, MAX_ECHOED_CHARS)}… (${s.length} characters)` : s;
}
