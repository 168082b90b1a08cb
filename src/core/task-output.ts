/**
 * A task's output: the JSON value it writes to the file named by LEOFLOW_OUTPUT, checked whole
 * (size, JSON, required) before it is stored, so an attempt's output is either all there or the
 * attempt fails saying why. Pure: the executors read the file, the store writes the value.
 */

/** Output sizes, in bytes: the default limit, and the most `--max-output-size` may set. */
export const OUTPUT_BYTES = { default: 64 * 1024, max: 1024 * 1024 } as const;

/** What a task's output is held to: its DAG's `output: required`, and the server's size limit. */
export interface OutputRule {
  taskId: string;
  /** Who wrote it, in an error; absent: `task "<taskId>"`. */
  subject?: string;
  required: boolean;
  maxBytes: number;
}

/** The output read: its JSON text (null when none was written), or why the attempt fails. */
export type CheckedOutput = { ok: true; json: string | null } | { ok: false; error: string };

/** `n` bytes for a human: "70 KiB (71680 bytes)". */
export function formatBytes(n: number): string {
  if (n < 1024) return `${n} bytes`;
  const unit = n >= 1024 * 1024 ? ['MiB', 1024 * 1024] : ['KiB', 1024];
  const v = n / (unit[1] as number);
  return `${Number.isInteger(v) ? v : v.toFixed(1)} ${unit[0]} (${n} bytes)`;
}

/**
 * Checks what an attempt left in its output file. `bytes` is what was read (at most `maxBytes` + 1
 * of it), `size` the file's whole size; `bytes` null: there is no file. An empty or blank file is
 * "not written", as GitHub's `$GITHUB_OUTPUT` starts empty.
 */
export function checkOutput(rule: OutputRule, bytes: Buffer | null, size: number): CheckedOutput {
  const task = rule.subject ?? `task "${rule.taskId}"`;
  if (size > rule.maxBytes) {
    return {
      ok: false,
      error:
        `output of ${task} is too big: ${formatBytes(size)}, ` +
        `the limit is ${formatBytes(rule.maxBytes)} (--max-output-size); nothing stored`,
    };
  }
  const text = bytes === null ? '' : bytes.toString('utf8');
  if (text.trim() === '') {
    return rule.required
      ? {
          ok: false,
          error:
            `${task} wrote no output (its DAG says output: required): ` +
            `write a JSON value to the file named by LEOFLOW_OUTPUT (limit ${formatBytes(rule.maxBytes)})`,
        }
      : { ok: true, json: null };
  }
  try {
    // Stored as Postgres jsonb: re-serialized here so what is stored is exactly what was checked.
    return { ok: true, json: JSON.stringify(JSON.parse(text)) };
  } catch (err) {
    return {
      ok: false,
      error: `output of ${task} is not JSON (${formatBytes(size)}): ${(err as Error).message}; nothing stored`,
    };
  }
}
