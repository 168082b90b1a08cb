import { echo, unstorable } from '../../core/check-text.js';
import { LIMITS } from '../../core/limits.js';
import { InvalidArgumentError } from './errors.js';

/** How deep the JSON text nests, outside its strings, read without parsing it. */
function nesting(text: string): number {
  let depth = 0;
  let max = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 92 /* \ */) i++;
      else if (c === 34 /* " */) inString = false;
    } else if (c === 34) inString = true;
    else if (c === 123 || c === 91 /* { [ */) max = Math.max(max, ++depth);
    else if (c === 125 || c === 93 /* } ] */) depth--;
  }
  return max;
}

/** Every key and string in a parsed value, with its path, must be storable (jsonb takes no \u0000). */
function checkStrings(v: unknown, path: string, field: string): void {
  if (typeof v === 'string') {
    const bad = unstorable(v);
    if (bad) throw new InvalidArgumentError(field, `${path}: ${bad}`);
  } else if (Array.isArray(v)) v.forEach((x, i) => checkStrings(x, `${path}[${i}]`, field));
  else if (v !== null && typeof v === 'object') {
    for (const [k, x] of Object.entries(v)) {
      const bad = unstorable(k);
      if (bad) throw new InvalidArgumentError(field, `${path}: a key ${bad}`);
      checkStrings(x, `${path}.${k.length > 40 ? `${k.slice(0, 40)}…` : k}`, field);
    }
  }
}

/**
 * A run's conf from TriggerRun's `conf_json` (or SendEvent's `payload_json`, `field`): a JSON object of at
 * most LIMITS.confBytes, nested at most LIMITS.confDepth deep, every string storable. Checked in that order,
 * so the size and the depth are known before anything parses it.
 */
export function parseConf(text: string, field = 'conf_json'): Record<string, unknown> {
  if (text.trim() === '') return {};
  const bytes = Buffer.byteLength(text);
  if (bytes > LIMITS.confBytes)
    throw new InvalidArgumentError(
      field,
      `must be at most ${LIMITS.confBytes} bytes (it is exported to every task's environment), got ${bytes}`,
    );
  const bad = unstorable(text);
  if (bad) throw new InvalidArgumentError(field, bad);
  const depth = nesting(text);
  if (depth > LIMITS.confDepth)
    throw new InvalidArgumentError(field, `must nest at most ${LIMITS.confDepth} levels deep, got ${depth}`);
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    throw new InvalidArgumentError(field, `is not valid JSON: ${echo((err as Error).message, 200)}`);
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed))
    throw new InvalidArgumentError(field, 'must be a JSON object');
  checkStrings(parsed, '$', field);
  return parsed as Record<string, unknown>;
}
