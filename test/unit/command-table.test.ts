import { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import { commandTable } from '../../src/cli/command-table.js';

/**
 * `leoflow --help` lists the commands from the table without loading them: each row must say what
 * its module registers, under the same name and description.
 */
describe('the CLI command table', () => {
  it('names each command as its module registers it, with the same description', async () => {
    for (const entry of commandTable) {
      const program = new Command('leoflow');
      await entry.register(program, () => {
        throw new Error('no API call while registering');
      });
      expect(
        program.commands.map((c) => c.name()),
        entry.name,
      ).toEqual([entry.name]);
      expect(program.commands[0]!.description(), entry.name).toBe(entry.description);
    }
  });

  it('has one row a name', () => {
    const names = commandTable.map((c) => c.name);
    expect(new Set(names).size).toBe(names.length);
  });
});
