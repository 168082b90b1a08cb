import type { TaskSpec } from '../gen/leoflow/v1/types_pb.js';

/**
 * One `NAME=value` line per plain variable and `NAME=<secret: where>` per secret (its reference; Leoflow
 * never holds the value).
 */
export function taskEnvLines(t: TaskSpec): string[] {
  const plain = Object.entries(t.env).map(([k, v]) => `${k}=${v}`);
  const secrets = Object.entries(t.secretEnv).map(([k, ref]) => `${k}=<secret: ${secretRefText(ref.source)}>`);
  return [...plain, ...secrets].sort();
}

/**
 * A reference as JSON output spells it: `{ env }`, `{ file }` or `{ kubernetes: { name, key } }`, as in the
 * DAG file.
 */
export function secretRefJson(source: TaskSpec['secretEnv'][string]['source']): Record<string, unknown> {
  if (source.case === 'kubernetes') return { kubernetes: { name: source.value.name, key: source.value.key } };
  if (source.case === undefined) return {};
  return { [source.case]: source.value };
}

function secretRefText(source: TaskSpec['secretEnv'][string]['source']): string {
  if (source.case === 'kubernetes') return `kubernetes ${source.value.name}/${source.value.key}`;
  if (source.case === undefined) return 'unknown';
  return `${source.case} ${source.value}`;
}
