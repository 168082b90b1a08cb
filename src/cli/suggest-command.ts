import type { Command } from 'commander';

/**
 * What an unknown command meant. A user who knows other tools types `leoflow trigger hello` or
 * `leoflow run logs 5`: the word names a command that lives elsewhere in the tree, so the answer
 * is that command with the same arguments, in a line or two rather than the whole help. A word
 * that names no command anywhere gets commander's own "did you mean" by spelling.
 */
export function suggestCommands(program: Command): void {
  const all = commandPaths(program);
  const visit = (cmd: Command) => {
    // A mistake prints a pointer to the help, not the help itself.
    cmd.showHelpAfterError(`(see \`${pathOf(cmd).join(' ')} --help\`)`);
    for (const sub of cmd.commands) visit(sub);
    if (cmd.commands.length === 0) return;
    cmd.on('command:*', (operands: string[], unknown: string[]) => {
      const [word = '', ...rest] = operands;
      const matches = all.filter((p) => p[p.length - 1] === word && p.join(' ') !== [...pathOf(cmd), word].join(' '));
      if (matches.length === 0) {
        // commander's own message, with its suggestion by spelling (a method its typings leave out).
        (cmd as unknown as { unknownCommand(): void }).unknownCommand();
        return;
      }
      const args = [...rest, ...unknown].map(shellWord);
      // `show 5` is a run, `show etl` a DAG: a numeric first argument puts `run` first.
      const runFirst = /^\d+$/.test(rest[0] ?? '');
      matches.sort((a, b) => rank(a, runFirst) - rank(b, runFirst));
      const lines = matches.map((p) => [...p, ...args].join(' '));
      const where = cmd.parent ? ` for '${pathOf(cmd).join(' ')}'` : '';
      const text =
        lines.length === 1
          ? `did you mean: ${lines[0]}`
          : `did you mean one of:\n${lines.map((l) => `  ${l}`).join('\n')}`;
      cmd.error(`error: unknown command '${word}'${where}\n${text}`, { code: 'commander.unknownCommand' });
    });
  };
  visit(program);
}

function rank(p: string[], runFirst: boolean): number {
  if (p[1] === 'run') return runFirst ? 0 : 1;
  return p[1] === 'dag' && !runFirst ? 0 : 2;
}

function pathOf(cmd: Command): string[] {
  const out: string[] = [];
  for (let c: Command | null = cmd; c; c = c.parent) out.unshift(c.name());
  return out;
}

/** Every runnable command as its words from the program down: ['leoflow', 'run', 'trigger']. */
function commandPaths(cmd: Command): string[][] {
  if (cmd.commands.length === 0) return [pathOf(cmd)];
  return cmd.commands.filter((c) => c.name() !== 'help').flatMap(commandPaths);
}

/** An argument as a user would retype it at a shell. */
function shellWord(s: string): string {
  return /^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`;
}
