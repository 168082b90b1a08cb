import { shellQuote } from '../process/shim.js';

/** Shell-like quoting so a human can read (and usually paste) what was run: the `started` system log line. */
export function formatCommand(command: string[]): string {
  const text = command.map((a) => (/^[\w@%+=:,./-]+$/.test(a) ? a : shellQuote(a))).join(' ');
  return text.length > 500 ? `${text.slice(0, 500)}…` : text;
}
