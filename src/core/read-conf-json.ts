/**
 * A run's conf as a client sends it (`conf_json`), read and checked before anything is written:
 * its size and nesting depth are measured on the text, before it is parsed, and every key and
 * string must be storable in Postgres' jsonb (no NUL, no lone surrogate).
 */
import { MAX_CONF_JSON_BYTES, MAX_CONF_JSON_DEPTH } from './limits.js';

/** Why a conf is refused; the message follows the field name. */
export class ConfJsonError extends Error {
  override readonly name = 'ConfJsonError';
}

const LONE_SURROGATE = /\p{Surrogate}/u;

/** Deepest nesting of `[` and `{` outside strings; stops counting past `limit`. */
function depthOf(text: string, limit: number): number {
  let depth = 0;
  let deepest = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++;
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x7b || c === 0x5b) {
      depth++;
      if (depth > deepest) deepest = depth;
      if (deepest > limit) return deepest;
    } else if (c === 0x7d || c === 0x5d) depth--;
  }
  return deepest;
}

function checkStorable(value: unknown): void {
  if (typeof value === 'string') {
    if (value.includes('\0')) throw new ConfJsonError('must not contain NUL characters (\\u0000), which Postgres cannot store');
    if (LONE_SURROGATE.test(value)) throw new ConfJsonError('is not valid Unicode: it holds a lone surrogate (such as \\ud800), which has no UTF-8 form');
  } else if (Array.isArray(value)) {
    for (const v of value) checkStorable(v);
  } else if (value !== null && typeof value === 'object') {
    for (const [k, v] of Object.entries(value)) {
      checkStorable(k);
      checkStorable(v);
    }
  }
}

/** The conf object in `text` (empty text: an empty conf), or a {@link ConfJsonError}. */
export function readConfJson(text: string): Record<string, unknown> {
  if (text.trim() === '') return {};
  const bytes = new TextEncoder().encode(text).byteLength;
  if (bytes > MAX_CONF_JSON_BYTES) throw new ConfJsonError(`is ${bytes} bytes, more than the limit of ${MAX_CONF_JSON_BYTES} bytes (it is given to every task in its environment)`);
  if (depthOf(text, MAX_CONF_JSON_DEPTH) > MAX_CONF_JSON_DEPTH) throw new ConfJsonError(`nests deeper than the limit of ${MAX_CONF_JSON_DEPTH} levels`);
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    throw new ConfJsonError(`is not valid JSON: ${(err as Error).message.slice(0, 200)}`);
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) throw new ConfJsonError('must be a JSON object');
  checkStorable(parsed);
  return parsed as Record<string, unknown>;
}
