import { readFileSync } from 'node:fs';
import { Command, CommanderError } from 'commander';
import type { Clients } from './client.js';
import { commandTable } from './command-table.js';
import { endOnClosedOutput } from './end-on-closed-output.js';
import { suggestCommands } from './suggest-command.js';

endOnClosedOutput();

/** package.json sits two folders up from both src/cli and dist/cli. */
const { version } = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
  version: string;
};

/** A repeated --server is kept whole, joined with commas (`leoflow agent` takes several). */
let serverGiven = false;
const addServer = (value: string, previous: string): string => {
  const out = serverGiven ? `${previous},${value}` : value;
  serverGiven = true;
  return out;
};

const program = new Command('leoflow')
  .description('Leoflow: DAGs of tasks, run on time, exactly as often as they should')
  .option(
    '-s, --server <url>',
    'control-plane API address; `leoflow agent` takes several (repeated or comma-separated) [env LEOFLOW_SERVER]',
    addServer,
    process.env.LEOFLOW_SERVER ?? 'http://127.0.0.1:7070',
  )
  .option(
    '--ca-file <file>',
    'PEM CA that an https:// --server must present a certificate from (default: the system roots) ' +
      '[env LEOFLOW_CA_FILE]',
    process.env.LEOFLOW_CA_FILE || undefined,
  )
  .option(
    '--client-cert <file>',
    'PEM client certificate, for a server started with --tls-client-auth all (with --client-key) ' +
      '[env LEOFLOW_CLIENT_CERT]',
    process.env.LEOFLOW_CLIENT_CERT || undefined,
  )
  .option(
    '--client-key <file>',
    'PEM private key of --client-cert [env LEOFLOW_CLIENT_KEY]',
    process.env.LEOFLOW_CLIENT_KEY || undefined,
  )
  .option(
    '--token <token>',
    'API token sent as "authorization: Bearer" (prefer the environment: a flag shows in `ps`) [env LEOFLOW_TOKEN]',
  )
  .version(version, '-V, --version', 'print the version of leoflow')
  .exitOverride();

/**
 * The first two words of a command line that are neither a global option nor its value
 * (`leoflow --server URL run list` → run, list).
 */
function commandWords(args: string[]): string[] {
  const words: string[] = [];
  for (let i = 0; i < args.length && words.length < 2; i++) {
    const a = args[i]!;
    if (a === '--') break;
    if (!a.startsWith('-')) words.push(a);
    else if (program.options.find((o) => o.long === a || o.short === a)?.required) i++;
  }
  return words;
}

/** Whether `word` is given to a command that has subcommands and names none of them. */
function unknownSubcommand(cmd: Command | undefined, word: string | undefined): boolean {
  if (!cmd || cmd.commands.length === 0 || word === undefined || word === 'help') return false;
  return !cmd.commands.some((c) => c.name() === word || c.aliases().includes(word));
}

/** The API clients, made at the first call; their module is loaded only for a command that has `api`. */
let createClients: ((server: string, token: string | null) => Clients) | undefined;
let clients: Clients | undefined;
const getClients = () => {
  const server = program.opts<{ server: string }>().server;
  if (server.includes(','))
    throw new Error(
      `--server: this command talks to one control-plane address, ` +
        `got ${JSON.stringify(server)} (only \`leoflow agent\` takes several)`,
    );
  const token = program.opts<{ token?: string }>().token ?? process.env.LEOFLOW_TOKEN ?? '';
  return (clients ??= createClients!(server, token.trim() === '' ? null : token.trim()));
};

const words = commandWords(process.argv.slice(2));
const asked = commandTable.find((c) => c.name === (words[0] === 'help' ? words[1] : words[0]));
if (asked === undefined && words.length === 0) {
  // Help: every command is listed from the table; their modules are not loaded.
  for (const c of commandTable) program.command(c.name).description(c.description);
} else {
  if (asked?.api || asked === undefined) {
    const [client, { clientTls }] = await Promise.all([import('./client.js'), import('./client-tls.js')]);
    createClients = (server, token) => client.createClients(server, clientTls(program.opts()), token);
  }
  if (asked) await asked.register(program, getClients);
  // A word that names no command (here or under the command asked for) is a mistake: only then is
  // every command loaded, so the suggestion can name where the word lives (`trigger` → `run trigger`).
  const sub = words[0] === 'help' ? undefined : words[1];
  if (
    asked === undefined ||
    unknownSubcommand(
      program.commands.find((c) => c.name() === asked.name),
      sub,
    )
  ) {
    // The server's and the agent's commands have no subcommands: their names are enough, and
    // their modules (the server, grpc-js) stay unloaded.
    for (const c of commandTable) {
      if (c === asked) continue;
      if (c.api) await c.register(program, getClients);
      else program.command(c.name).description(c.description);
    }
  }
}
suggestCommands(program);

try {
  await program.parseAsync(process.argv);
} catch (err) {
  if (err instanceof CommanderError) {
    process.exit(err.exitCode === 0 ? 0 : 2);
  }
  // Loaded already whenever an API call failed: the error path of a command without one pays for it.
  const { ConnectError } = await import('@connectrpc/connect');
  if (err instanceof ConnectError) {
    // "[not_found] run 7 not found" → "leoflow: not_found: run 7 not found"
    const [{ tlsFailure }, { wrongScheme }] = await Promise.all([
      import('./tls-failure.js'),
      import('./wrong-scheme.js'),
    ]);
    const server = program.opts<{ server: string }>().server;
    const msg =
      tlsFailure(err, server) ??
      (await wrongScheme(err, server)) ??
      (err.code === 14
        ? `cannot reach the control plane at ${server} (${err.rawMessage}); is \`leoflow server\` running?`
        : err.message);
    process.stderr.write(`leoflow: ${msg}\n`);
  } else {
    process.stderr.write(`leoflow: ${(err as Error).message}\n`);
  }
  process.exit(1);
}
