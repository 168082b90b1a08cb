import { LIMITS } from './limits.js';

/**
 * A value as an error message quotes it: JSON-quoted and cut to a bounded length, so that an
 * error about a 100 KB id does not carry the 100 KB back.
 */
export function echo(value: unknown, max: number = LIMITS.echoChars): string {
  const s =
    typeof value === 'string'
      ? value
      : typeof value === 'bigint'
        ? value.toString()
        : (JSON.stringify(value) ?? String(value));
  const quoted = JSON.stringify(s.length > max ? s.slice(0, max) : s);
  return s.length > max ? `${quoted.slice(0, -1)}…" (${s.length} characters)` : quoted;
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** `s` with each NUL and lone surrogate replaced by U+FFFD: output is stored, never refused for its bytes. */
export function replaceUnstorable(s: string): string {
  return unstorable(s) === null
    ? s
    : s.replaceAll('\0', '\uFFFD').replace(new RegExp(LONE_SURROGATE.source, 'g'), '\uFFFD');
}

/**
 * Why a text cannot be stored as Postgres text (null: it can): a NUL character, or a lone UTF-16
 * surrogate (no UTF-8 encoding exists for it).
 */
export function unstorable(s: string): string | null {
  if (s.includes('\0')) return 'must not contain NUL characters';
  if (LONE_SURROGATE.test(s)) return 'must be valid Unicode (it has a lone surrogate)';
  return null;
}
