import { readFile } from 'node:fs/promises';

/**
 * The effect ledger: every task of the chaos DAGs appends one line when it starts and one when it
 * ends (or when a SIGTERM stops it), so what really ran can be compared with what the database
 * recorded. One clock for every timestamp: the machine's real-time clock (`date +%s%N` in the
 * task, `Date.now()` in the harness); tasks and harness run on the same machine.
 *
 * A line is `L <kind> <run> <task> <try> <pid> <ns> <exit> <ti> E`. Each is one short `printf`
 * to a file opened with O_APPEND, so lines of concurrent tasks never interleave; the leading `L`
 * and the trailing `E` make a line cut short (which would need a write torn by a kill, not seen
 * on a local file) visible as malformed instead of misread.
 */

export type LedgerKind = 'start' | 'end' | 'term';

export interface LedgerLine {
  kind: LedgerKind;
  run: string;
  task: string;
  try: number;
  pid: number;
  /** Real-time clock, microseconds since the epoch. */
  atUs: number;
  /** The exit status the task is about to return (end and term lines). */
  exit: number | null;
  ti: string;
}

/** One process that ran one attempt, from its lines. */
export interface Execution {
  run: string;
  task: string;
  try: number;
  ti: string;
  pid: number;
  startUs: number | null;
  /** From its end or term line; null when it wrote neither (killed, or still running). */
  endUs: number | null;
  endKind: 'end' | 'term' | null;
  exit: number | null;
}

export interface Ledger {
  lines: LedgerLine[];
  malformed: string[];
  executions: Execution[];
}

/** `run/task/try`: the key of an attempt in the ledger and in the database. */
export function attemptKey(a: { run: string; task: string; try: number }): string {
  return `${a.run}/${a.task}/${a.try}`;
}

export function executionKey(e: { run: string; task: string; try: number; pid: number }): string {
  return `${attemptKey(e)}#${e.pid}`;
}

/**
 * The script every chaos task runs (`sh <script>`): start line, a line of output, a sleep of
 * 50–800 ms (CHAOS_SLEEP_MS), a line of output (not with CHAOS_QUIET_END=1), end line, exit. CHAOS_FAIL_FIRST_TRY=1
 * makes its first try exit 3. A task that prints after its supervisor died is killed by SIGPIPE
 * (its output is a pipe to that supervisor); a quiet one lives on: both kinds are in the DAGs.
 * The sleep runs in the background so a SIGTERM is handled at once (the trap writes a term line);
 * the traps are dropped before the end line, so a process that wrote `end … 0` exits 0 unless it
 * is SIGKILLed in the few instructions between (which only the harness's own kills do: see the
 * checks). Output goes to the agent's pipe, as a real task's would.
 */
export function ledgerTaskScript(ledgerPath: string): string {
  const q = `'${ledgerPath.replaceAll("'", `'\\''`)}'`;
  return [
    '#!/bin/sh',
    `ledger=${q}`,
    'line() {',
    '  printf \'L %s %s %s %s %s %s %s %s E\\n\' "$1" "$LEOFLOW_RUN_ID" "$LEOFLOW_TASK_ID" "$LEOFLOW_TRY_NUMBER" "$$" "$(date +%s%N)" "$2" "$LEOFLOW_TI_ID" >> "$ledger"',
    '}',
    "trap 'line term 143; exit 143' TERM INT HUP",
    'line start -',
    'echo "start $LEOFLOW_TASK_ID try $LEOFLOW_TRY_NUMBER"',
    'ms=${CHAOS_SLEEP_MS:-$(( $$ % 751 + 50 ))}',
    'sleep "$(( ms / 1000 )).$(printf %03d $(( ms % 1000 )))" >/dev/null 2>&1 &',
    'wait $!',
    'code=0',
    'if [ "${CHAOS_FAIL_FIRST_TRY:-0}" = 1 ] && [ "$LEOFLOW_TRY_NUMBER" = 1 ]; then code=3; fi',
    'if [ "${CHAOS_QUIET_END:-0}" != 1 ]; then echo "finishing with $code"; fi',
    "trap '' TERM INT HUP",
    'line end "$code"',
    'exit "$code"',
    '',
  ].join('\n');
}

const LINE = /^L (start|end|term) (\d+) ([A-Za-z0-9_.-]+) (\d+) (\d+) (\d{10,}) (-|\d+) (\d+) E$/;

/** One ledger line, or null when it is not a whole, well-formed line. */
export function parseLedgerLine(text: string): LedgerLine | null {
  const m = LINE.exec(text);
  if (!m) return null;
  return {
    kind: m[1] as LedgerKind,
    run: m[2]!,
    task: m[3]!,
    try: Number(m[4]),
    pid: Number(m[5]),
    atUs: Number(BigInt(m[6]!) / 1000n),
    exit: m[7] === '-' ? null : Number(m[7]),
    ti: m[8]!,
  };
}

/** The lines, grouped into executions (one per process and attempt). */
export function ledgerOf(text: string): Ledger {
  const lines: LedgerLine[] = [];
  const malformed: string[] = [];
  for (const raw of text.split('\n')) {
    if (raw === '') continue;
    const l = parseLedgerLine(raw);
    if (l) lines.push(l);
    else malformed.push(raw);
  }
  const byKey = new Map<string, Execution>();
  for (const l of lines) {
    const k = executionKey(l);
    let e = byKey.get(k);
    if (!e) {
      e = {
        run: l.run,
        task: l.task,
        try: l.try,
        ti: l.ti,
        pid: l.pid,
        startUs: null,
        endUs: null,
        endKind: null,
        exit: null,
      };
      byKey.set(k, e);
    }
    if (l.kind === 'start') e.startUs = e.startUs === null ? l.atUs : Math.min(e.startUs, l.atUs);
    else if (e.endKind === null) {
      // The first end-ish line counts: the traps are dropped before the end line is written.
      e.endKind = l.kind;
      e.endUs = l.atUs;
      e.exit = l.exit;
    }
  }
  return { lines, malformed, executions: [...byKey.values()] };
}

export async function readLedger(path: string): Promise<Ledger> {
  return ledgerOf(
    await readFile(path, 'utf8').catch((err: NodeJS.ErrnoException) =>
      err.code === 'ENOENT' ? '' : Promise.reject(err),
    ),
  );
}
