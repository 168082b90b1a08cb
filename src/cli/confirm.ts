import { createInterface } from 'node:readline/promises';

/**
 * Asks a yes/no question at the terminal; anything but y or yes is no. Without a terminal (a
 * script, a pipe) there is no one to ask: the command must be told with `--yes`, and `refusal`
 * says so.
 */
export async function confirm(question: string, refusal: string): Promise<boolean> {
  if (!process.stdin.isTTY) throw new Error(refusal);
  const rl = createInterface({ input: process.stdin, output: process.stderr });
  try {
    return /^y(es)?$/i.test((await rl.question(`${question} [y/N] `)).trim());
  } finally {
    rl.close();
  }
}
