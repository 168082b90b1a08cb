import type { Command } from 'commander';
import { parseDuration } from '../../core/duration.js';
import type { Token } from '../../gen/leoflow/v1/token_pb.js';
import type { Clients } from '../client.js';
import { table, time } from '../format.js';

interface Direct {
  databaseUrl?: string;
}

/**
 * The TokenService to call: the API's, or with `--database-url` the same service run in this
 * process on Postgres itself (direct-token-service.ts), the way to the first admin token.
 */
async function tokenService<T>(
  opts: Direct,
  clients: () => Clients,
  fn: (tokens: Clients['tokens']) => Promise<T>,
): Promise<T> {
  if (!opts.databaseUrl) return fn(clients().tokens);
  const { directTokenService } = await import('../../server/api/direct-token-service.js');
  const direct = await directTokenService(opts.databaseUrl);
  try {
    return await fn(direct.client);
  } finally {
    await direct.close();
  }
}

function ttlSeconds(expires: string | undefined): number {
  if (expires === undefined || expires === 'never') return 0;
  const ms = parseDuration(expires);
  if (!(ms > 0))
    throw new Error(`--expires: must be a positive duration such as 90d, or never, got ${JSON.stringify(expires)}`);
  return Math.ceil(ms / 1000);
}

function tokenJson(t: Token) {
  return {
    id: t.id,
    name: t.name,
    role: t.role,
    agent_pattern: t.agentPattern || null,
    created_at: time(t.createdAt),
    expires_at: t.expiresAt ? time(t.expiresAt) : null,
    revoked: t.revoked,
  };
}

function state(t: Token): string {
  if (t.revoked) return 'revoked';
  if (t.expiresAt && Number(t.expiresAt.seconds) * 1000 <= Date.now()) return 'expired';
  return 'active';
}

export function registerToken(program: Command, clients: () => Clients): void {
  const token = program
    .command('token')
    .description('API tokens and agent credentials (admin only; --database-url to make the first admin token)');
  const dbOption = [
    '--database-url <url>',
    'work on this Postgres directly instead of through the API (the first admin token)',
  ] as const;

  token
    .command('create')
    .description('create a token: its secret is printed once, on stdout, and never again')
    .requiredOption(
      '--role <role>',
      'viewer (reads) | operator (+ trigger, cancel, clear, pause, drain) | admin (+ apply and delete DAGs, ' +
        'clean history, tokens) | agent',
    )
    .option('--name <name>', 'what it is for, shown in lists', '')
    .option('--agent-pattern <glob>', 'role agent: the agent ids it may say Hello as, e.g. gpu-* or worker-1')
    .option('--expires <duration>', 'lifetime, e.g. 90d, or never', 'never')
    .option(...dbOption)
    .option('-o, --output <format>', 'secret (only the secret, for scripts) | json', 'secret')
    .action(
      async (opts: Direct & { role: string; name: string; agentPattern?: string; expires: string; output: string }) => {
        const req = {
          name: opts.name,
          role: opts.role,
          agentPattern: opts.agentPattern ?? '',
          ttlSeconds: ttlSeconds(opts.expires),
        };
        const res = await tokenService(opts, clients, (tokens) =>
          tokens.createToken({ ...req, ttlSeconds: BigInt(req.ttlSeconds) }),
        );
        const t = res.token!;
        const secret = res.secret;
        if (opts.output === 'json') process.stdout.write(`${JSON.stringify({ ...tokenJson(t), secret }, null, 2)}\n`);
        else {
          process.stdout.write(`${secret}\n`);
          process.stderr.write(
            `created token ${t.id} (role ${t.role}${t.agentPattern ? `, agent ids ${t.agentPattern}` : ''}); ` +
              `its secret is above and is not shown again\n`,
          );
        }
      },
    );

  token
    .command('list')
    .description('list tokens (never their secrets)')
    .option(...dbOption)
    .option('-o, --output <format>', 'table | json', 'table')
    .action(async (opts: Direct & { output: string }) => {
      const { tokens } = await tokenService(opts, clients, (api) => api.listTokens({}));
      if (opts.output === 'json') {
        process.stdout.write(`${JSON.stringify(tokens.map(tokenJson), null, 2)}\n`);
        return;
      }
      process.stdout.write(
        `${table(
          ['ID', 'NAME', 'ROLE', 'AGENTS', 'STATE', 'CREATED', 'EXPIRES'],
          tokens.map((t) => [
            t.id,
            t.name || '-',
            t.role,
            t.agentPattern || '-',
            state(t),
            time(t.createdAt),
            t.expiresAt ? time(t.expiresAt) : 'never',
          ]),
        )}\n`,
      );
    });

  token
    .command('revoke')
    .description('revoke a token by id: refused from its next call on, on every replica')
    .argument('<id>', 'the token id (see `leoflow token list`)')
    .option(...dbOption)
    .action(async (id: string, opts: Direct) => {
      const { revoked, streamsCut } = await tokenService(opts, clients, (tokens) => tokens.revokeToken({ id }));
      if (!revoked) return void process.stdout.write(`token ${id} was revoked already\n`);
      // Straight in the database no server answers: each ends the token's streams when told.
      const cut = opts.databaseUrl
        ? 'the servers end its open streams as they are told'
        : `ended ${streamsCut} open stream${streamsCut === 1 ? '' : 's'} on this server; ` +
          `the other replicas end theirs as they are told`;
      process.stdout.write(`revoked token ${id}: ${cut}\n`);
    });
}
