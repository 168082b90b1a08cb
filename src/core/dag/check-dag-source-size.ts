/**
 * The size limit on a DAG file, checked before anything is parsed so a huge file costs one pass
 * over its characters. Kept apart from `parseDag` so the server can refuse an oversized file
 * before it copies it to a worker thread.
 */
import type { DagIssue } from '../dag-spec.js';
import { MAX_DAG_SOURCE_BYTES } from '../limits.js';

export { MAX_DAG_SOURCE_BYTES };

/**
 * The size check alone, so a caller can refuse an oversized file before copying it anywhere
 * (e.g. to a worker thread). Returns the issue `parseDag` would report, or null.
 */
export function checkDagSourceSize(source: string): DagIssue | null {
  // Every UTF-16 unit is at least one UTF-8 byte and at most three, so only count when unsure.
  const bytes = source.length * 3 <= MAX_DAG_SOURCE_BYTES ? 0 : utf8Length(source);
  if (bytes <= MAX_DAG_SOURCE_BYTES) return null;
  return {
    path: '',
    message: `the DAG file is ${bytes} bytes; the limit is ${MAX_DAG_SOURCE_BYTES} bytes (1 MiB)`,
  };
}

function utf8Length(s: string): number {
  let bytes = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) bytes += 1;
    else if (c < 0x800) bytes += 2;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
      bytes += 4; // a surrogate pair is one 4-byte code point
      i++;
    } else bytes += 3;
  }
  return bytes;
}
