/**
 * The shim: what supervises one task's process, in the manner of containerd's shim or podman's
 * conmon, and outlives the server or agent that started it. It is a shell (ready-shell.ts) that
 * leads its own session and process group, runs the task in the foreground in that group, with
 * its output appended to files in the attempt's folder (attempt-dir.ts), writes the exit status
 * next to them, and then kills what is left of the group, itself included, so no descendant of
 * the task outlives it. Its parent's death changes none of this: nothing it holds is a pipe to the
 * parent once the task has started, so a restarted parent re-attaches to it (shim-process.ts).
 *
 * A signal the shim receives while the task runs (the group's SIGTERM on cancel or timeout) waits
 * until the task is over (a trap runs after the foreground command, in a POSIX shell), so the
 * status is written for a task stopped that way too; only SIGKILL of the group leaves none. A
 * signal that lands after the shim decided to start the task and before the task's exec reaches
 * the shim alone, so the parent sends its SIGTERM only once the task has exec'd (shim-process.ts).
 *
 * A shim started by the spawn helper (spawn-helper.ts) shares its reporting pipe with every other
 * shim of that helper: it tags what it says with its start's number (and its pid), and says one
 * thing more, once the status is written ("<n> end"). It keeps the pipe while the task runs (the task does not get
 * it) and ignores SIGPIPE before that last write, so a parent gone meanwhile changes nothing.
 */

/** Extra pipe of a shim to its parent: "cwd" comes on it when `cd` failed, "." just before the
 *  task starts; then it is closed (or kept, on a shared pipe: see above). */
export const STATUS_FD = 3;

/** The task's environment names the attempt's folder, so a shim whose folder is gone can still be
 *  found and proved dead (orphans.ts). */
export const ATTEMPT_DIR_ENV = 'LEOFLOW_ATTEMPT_DIR';

/**
 * Names the agent whose shim this is, and that agent's process ("<agent id> <pid> <start ticks>"),
 * in the environment of the shim and its task (supervisor-mark.ts).
 */
export const SUPERVISOR_ENV = 'LEOFLOW_SUPERVISOR';

/** A single-quoted shell word: every byte but NUL stands for itself. */
export function shellQuote(s: string): string {
  return `'${s.replaceAll("'", `'\\''`)}'`;
}

/** Environment names a shell can `export` (a DAG's env names are checked to be such). */
const NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

export interface ShimFiles {
  dir: string;
  stdout: string;
  stderr: string;
  status: string;
}

/**
 * The lines a shell runs to become this attempt's shim, or the reason it cannot: a NUL anywhere
 * (no process can be given one), an environment name a shell cannot export, an empty command or
 * one a shell would read as an option.
 */
export function shimLines(
  command: readonly string[],
  env: Readonly<Record<string, string>>,
  cwd: string | null,
  files: ShimFiles,
  /** The start's number on a pipe shared by many shims (spawn-helper.ts); none for a pipe of its own. */
  shared: number | null = null,
): { lines: string } | { error: string } {
  const [file] = command;
  if (file === undefined || file === '') return { error: 'empty command' };
  if (file.startsWith('-')) return { error: `the command ${JSON.stringify(file)} starts with "-"` };
  const words = [...command, ...Object.keys(env), ...Object.values(env), cwd ?? ''];
  if (words.some((w) => w.includes('\0')))
    return { error: 'the command, its directory or its environment holds a NUL byte' };
  const badName = Object.keys(env).find((k) => !NAME.test(k));
  if (badName !== undefined)
    return { error: `environment name ${JSON.stringify(badName)} is not a shell name ([A-Za-z_][A-Za-z0-9_]*)` };
  const q = shellQuote;
  const lines: string[] = [];
  const tag = shared === null ? '' : `${shared} `;
  const cwdFailed = shared === null ? 'echo cwd' : `echo "${tag}cwd $$"`;
  if (cwd !== null) lines.push(`cd -- ${q(cwd)} 2>/dev/null || { ${cwdFailed} >&${STATUS_FD}; exit 127; }`);
  // The supervisor's mark comes from the shell's own environment (supervisor-mark.ts): a task's
  // env may not unset or forge it, or it could hide from the agent that must prove it dead.
  for (const [k, v] of Object.entries(env)) if (k !== SUPERVISOR_ENV) lines.push(`export ${k}=${q(v)}`);
  lines.push(`export ${ATTEMPT_DIR_ENV}=${q(files.dir)}`);
  // Handlers, not ignores: the task gets the default dispositions back at its exec. A signal that
  // came before the task started stops it from starting, as it would have stopped the task.
  lines.push(`trap 'leoflow_signal=15' TERM; trap 'leoflow_signal=2' INT; trap 'leoflow_signal=1' HUP`);
  if (shared === null) {
    lines.push(`printf . >&${STATUS_FD}`);
    lines.push(`exec ${STATUS_FD}>&-`);
  } else {
    lines.push(`echo "${tag}. $$" >&${STATUS_FD}`);
  }
  const keptFrom = shared === null ? '' : ` ${STATUS_FD}>&-`;
  lines.push(
    `if [ -z "$leoflow_signal" ]; ` +
      `then ${command.map(q).join(' ')} </dev/null >>${q(files.stdout)} 2>>${q(files.stderr)}${keptFrom}; ` +
      `leoflow_status=$?; else leoflow_status=$((128 + leoflow_signal)); fi`,
  );
  lines.push(`echo $leoflow_status >${q(files.status)}`);
  if (shared !== null) lines.push(`trap '' PIPE; echo '${tag}end' >&${STATUS_FD} 2>/dev/null`);
  lines.push('kill -KILL 0');
  return { lines: lines.join('\n') + '\n' };
}
