import { readFileSync } from 'node:fs';
import { ConnectError } from '@connectrpc/connect';
import { Command, CommanderError } from 'commander';
import { createClients, type Clients } from './client.js';
import { endOnClosedOutput } from './end-on-closed-output.js';
import { suggestCommands } from './suggest-command.js';
import { clientTls } from './client-tls.js';
import { tlsFailure } from './tls-failure.js';
import { wrongScheme } from './wrong-scheme.js';
import { registerAgent } from './commands/agent.js';
import { registerAgents } from './commands/agents.js';
import { registerDag } from './commands/dag.js';
import { registerDb } from './commands/db.js';
import { registerLogs } from './commands/logs.js';
import { registerReplicas } from './commands/replicas.js';
import { registerStatus } from './commands/status.js';
import { registerToken } from './commands/token.js';
import { registerRun } from './commands/run.js';
import { registerServer } from './commands/server.js';

endOnClosedOutput();

/** package.json sits two folders up from both src/cli and dist/cli. */
const { version } = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };

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
  .version(version, '-V, --version', 'print the version of leoflow')
  .exitOverride();

let clients: Clients | undefined;
const getClients = () => {
  const server = program.opts<{ server: string }>().server;
  if (server.includes(',')) throw new Error(`--server: this command talks to one control-plane address, got ${JSON.stringify(server)} (only \`leoflow agent\` takes several)`);
  const token = program.opts<{ token?: string }>().token ?? process.env.LEOFLOW_TOKEN ?? '';
  return (clients ??= createClients(server, clientTls(program.opts()), token.trim() === '' ? null : token.trim()));
};

registerServer(program);
registerDag(program, getClients);
registerRun(program, getClients);
registerLogs(program, getClients);
registerAgent(program);
registerAgents(program, getClients);
registerReplicas(program, getClients);
registerStatus(program, getClients);
registerDb(program, getClients);
registerToken(program, getClients);
suggestCommands(program);

try {
  await program.parseAsync(process.argv);
} catch (err) {
  if (err instanceof CommanderError) {
    process.exit(err.exitCode === 0 ? 0 : 2);
  }
  if (err instanceof ConnectError) {
    // "[not_found] run 7 not found" → "leoflow: not_found: run 7 not found"
    const server = program.opts<{ server: string }>().server;
    const msg = tlsFailure(err, server) ?? (await wrongScheme(err, server)) ?? (err.code === 14 ? `cannot reach the control plane at ${server} (${err.rawMessage}); is \`leoflow server\` running?` : err.message);
    process.stderr.write(`leoflow: ${msg}\n`);
  } else {
    process.stderr.write(`leoflow: ${(err as Error).message}\n`);
  }
  process.exit(1);
}
