/**
 * A task's inputs: its upstreams' outputs as one JSON object keyed by upstream task id (the file
 * named by LEOFLOW_INPUTS), and the scalar values its DAG names as environment variables
 * (`inputs: { NAME: upstream.path.to.value }`). Values travel as data, in a file or a variable,
 * never spliced into a command or a shell string. Pure: the store reads the outputs.
 */

/** What an attempt's process is given; `error` when an input it names is missing. */
export type AttemptInputs = { json: string; env: Record<string, string> } | { error: string };

/** One `inputs:` entry's reference: `task` and the path of keys (or list indexes) into its output. */
export interface InputRef {
  task: string;
  path: string[];
}

/**
 * Splits `upstream.a.0.b` into the upstream's id and the path in its output. A task id may hold
 * dots, so the longest of `upstreams` the reference starts with is its task; else its first word.
 */
export function parseInputRef(ref: string, upstreams: readonly string[]): InputRef {
  const task = upstreams
    .filter((u) => ref === u || ref.startsWith(`${u}.`))
    .reduce<string | null>((a, u) => (a === null || u.length > a.length ? u : a), null);
  if (task !== null) return { task, path: ref === task ? [] : ref.slice(task.length + 1).split('.') };
  const [first = '', ...path] = ref.split('.');
  return { task: first, path };
}

/** The longest value an `inputs:` variable holds: an environment past ~128 KiB fails exec. */
export const INPUT_ENV_CHARS = 32 * 1024;

/**
 * The inputs of task `taskId` from its upstreams' outputs (`outputs`: upstream id → JSON text, only
 * those that wrote one). `inputEnv`: the DAG's `inputs:` mapping, variable → reference.
 */
export function buildInputs(
  taskId: string,
  upstreams: readonly string[],
  outputs: ReadonlyMap<string, string>,
  inputEnv: Readonly<Record<string, string>> | undefined,
): AttemptInputs {
  const parsed = new Map<string, unknown>();
  for (const [id, json] of outputs) parsed.set(id, JSON.parse(json));
  const env: Record<string, string> = {};
  for (const [name, ref] of Object.entries(inputEnv ?? {})) {
    const { task, path } = parseInputRef(ref, upstreams);
    const why = `input ${name} of task "${taskId}" (${ref})`;
    if (!parsed.has(task)) return { error: `${why}: upstream task "${task}" wrote no output` };
    let v = parsed.get(task);
    for (const [i, key] of path.entries()) {
      const inside = v !== null && typeof v === 'object' && Object.hasOwn(v, key);
      if (!inside) {
        const at = [task, ...path.slice(0, i + 1)].join('.');
        return { error: `${why}: the output of "${task}" has no ${at}` };
      }
      v = (v as Record<string, unknown>)[key];
    }
    if (typeof v !== 'string' && typeof v !== 'number' && typeof v !== 'boolean') {
      const what = v === null ? 'null' : Array.isArray(v) ? 'a list' : 'an object';
      return { error: `${why}: is ${what}, not a string, number or boolean (read it from LEOFLOW_INPUTS instead)` };
    }
    const s = String(v);
    if (s.includes('\0')) return { error: `${why}: contains a NUL character` };
    if (s.length > INPUT_ENV_CHARS) {
      return { error: `${why}: ${s.length} characters, over ${INPUT_ENV_CHARS} (read it from LEOFLOW_INPUTS instead)` };
    }
    env[name] = s;
  }
  // Built from the stored texts, not re-serialized: each upstream's output as it was stored.
  const json = `{${[...outputs].map(([id, out]) => `${JSON.stringify(id)}:${out}`).join(',')}}`;
  return { json, env };
}
