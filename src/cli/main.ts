import { Command, CommanderError } from 'commander';
import type { Clients } from './client.js';
import { commandTable, type CommandEntry } from './command-table.js';

/** A repeated --server is kept whole, joined with commas (`leoflow agent` takes several). */
let serverGiven = false;
const addServer = (value: string, previous: string): string => {
  const out = serverGiven ? `${previous},${value}` : value;
  serverGiven = true;
  return out;
};

const program = new Command('leoflow')
  .description('Leoflow: DAGs of tasks, run on time, exactly as often as they should')
  .option('-s, --server <url>', 'control-plane API address; `leoflow agent` takes several (repeated or comma-separated) [env LEOFLOW_SERVER]', addServer, process.env.LEOFLOW_SERVER ?? 'http://127.0.0.1:7070')
  .option('--ca-file <file>', 'PEM CA that an https:// --server must present a certificate from (default: the system roots) [env LEOFLOW_CA_FILE]', process.env.LEOFLOW_CA_FILE || undefined)
  .option('--client-cert <file>', 'PEM client certificate, for a server started with --tls-client-auth all (with --client-key) [env LEOFLOW_CLIENT_CERT]', process.env.LEOFLOW_CLIENT_CERT || undefined)
  .option('--client-key <file>', 'PEM private key of --client-cert [env LEOFLOW_CLIENT_KEY]', process.env.LEOFLOW_CLIENT_KEY || undefined)
  .option('--token <token>', 'API token sent as "authorization: Bearer" (prefer the environment: a flag shows in `ps`) [env LEOFLOW_TOKEN]')
  .showHelpAfterError()
  .exitOverride();

/**
 * The command a command line asks for: the first word that is neither a global option nor its
 * value (`leoflow --server URL run list` → run; `leoflow help run` → run). Undefined when there
 * is none or it names no command.
 */
function commandAskedFor(args: string[]): CommandEntry | undefined {
  const words: string[] = [];
  for (let i = 0; i < args.length && words.length < 2; i++) {
    const a = args[i]!;
    if (a === '--') break;
    if (!a.startsWith('-')) words.push(a);
    else if (program.options.find((o) => o.long === a || o.short === a)?.required) i++;
  }
  const name = words[0] === 'help' ? words[1] : words[0];
  return commandTable.find((c) => c.name === name);
}

/** The API clients, made at the first call; their module is loaded only for a command that has `api`. */
let createClients: ((server: string, token: string | null) => Clients) | undefined;
let clients: Clients | undefined;
const getClients = () => {
  const server = program.opts<{ server: string }>().server;
  if (server.includes(',')) throw new Error(`--server: this command talks to one control-plane address, got ${JSON.stringify(server)} (only \`leoflow agent\` takes several)`);
  const token = program.opts<{ token?: string }>().token ?? process.env.LEOFLOW_TOKEN ?? '';
  return (clients ??= createClients!(server, token.trim() === '' ? null : token.trim()));
};

const asked = commandAskedFor(process.argv.slice(2));
if (asked === undefined) {
  // Help, or a word that is no command: every command is listed (and commander's "unknown
  // command" suggests the nearest); their modules are not loaded.
  for (const c of commandTable) program.command(c.name).description(c.description);
} else {
  if (asked.api) {
    const [client, { clientTls }] = await Promise.all([import('./client.js'), import('./client-tls.js')]);
    createClients = (server, token) => client.createClients(server, clientTls(program.opts()), token);
  }
  await asked.register(program, getClients);
}

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
    const { tlsFailure } = await import('./tls-failure.js');
    const server = program.opts<{ server: string }>().server;
    const msg = tlsFailure(err, server) ?? (err.code === 14 ? `cannot reach the control plane at ${server} (${err.rawMessage}); is \`leoflow server\` running?` : err.message);
    process.stderr.write(`leoflow: ${msg}\n`);
  } else {
    process.stderr.write(`leoflow: ${(err as Error).message}\n`);
  }
  process.exit(1);
}
