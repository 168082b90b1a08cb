import { InvalidArgumentError } from 'commander';

const INT64_MAX = 9223372036854775807n;

/**
 * Parsers for the CLI's numeric arguments and flags, run by commander before a command starts, so
 * a bad value is refused at once with its name, the value and what it should be (commander adds
 * "argument 'run_id'" or "option '--try <n>'" and the value in front), and never reaches a request.
 */

/** A 64-bit id or sequence number, kept as the decimal string the API takes. */
function int64(what: string, min: 0n | 1n): (value: string) => string {
  return (value) => {
    const v = value.trim();
    if (!/^\d{1,19}$/.test(v) || BigInt(v) < min || BigInt(v) > INT64_MAX) throw new InvalidArgumentError(what);
    return String(BigInt(v));
  };
}

/** A run id: `leoflow run list` shows them. */
export const runIdArgument = int64('A run id is a positive integer, as `leoflow run list` shows (e.g. 42).', 1n);

/** An event seq to resume after: 0 (from the start) or a seq printed by `run watch -o json`. */
export const seqArgument = int64(
  'A seq is 0 (from the start) or a positive integer, as `run watch -o json` prints.',
  0n,
);

/** A whole number from min to max, for counts and try numbers. */
export function integerArgument(what: string, min: number, max: number): (value: string) => number {
  return (value) => {
    const v = value.trim();
    const n = Number(v);
    if (!/^\d+$/.test(v) || !Number.isSafeInteger(n) || n < min || n > max)
      throw new InvalidArgumentError(`${what} is an integer from ${min} to ${max}.`);
    return n;
  };
}
