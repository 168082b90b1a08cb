import { create } from '@bufbuild/protobuf';
import type { Command } from 'commander';
import { parseDuration } from '../../core/duration.js';
import { TokenSchema, type Token } from '../../gen/leoflow/v1/token_pb.js';
import type { Clients } from '../client.js';
import { table, time } from '../format.js';

interface Direct {
  databaseUrl?: string;
}

/**
 * `--database-url` goes to Postgres itself, not through the API: the way to the first admin
 * token, for whoever operates the server (and so holds its database's credentials) before any
 * token exists. The migrations run first, so it works before the server ever started.
 */
async function withDatabase<T>(url: string, fn: (sql: import('../../db/sql.js').Sql) => Promise<T>): Promise<T> {
  const { createSql } = await import('../../db/sql.js');
  const { migrate } = await import('../../db/migrate.js');
  const sql = createSql(url, { max: 1, applicationName: 'leoflow-token' });
  try {
    await migrate(sql);
    return await fn(sql);
  } finally {
    await sql.end({ timeout: 5 });
  }
}

function ttlSeconds(expires: string | undefined): number {
  if (expires === undefined || expires === 'never') return 0;
  const ms = parseDuration(expires);
  if (!(ms > 0)) throw new Error(`--expires: must be a positive duration such as 90d, or never, got ${JSON.stringify(expires)}`);
  return Math.ceil(ms / 1000);
}

function tokenJson(t: Token) {
  return { id: t.id, name: t.name, role: t.role, agent_pattern: t.agentPattern || null, created_at: time(t.createdAt), expires_at: t.expiresAt ? time(t.expiresAt) : null, revoked: t.revoked };
}

function state(t: Token): string {
  if (t.revoked) return 'revoked';
  if (t.expiresAt && Number(t.expiresAt.seconds) * 1000 <= Date.now()) return 'expired';
  return 'active';
}

export function registerToken(program: Command, clients: () => Clients): void {
  const token = program.command('token').description('API tokens and agent credentials (admin only; --database-url to make the first admin token)');
  const dbOption = ['--database-url <url>', 'work on this Postgres directly instead of through the API (the first admin token)'] as const;

  token
    .command('create')
    .description('create a token: its secret is printed once, on stdout, and never again')
    .requiredOption('--role <role>', 'viewer (reads) | operator (+ trigger, cancel, clear, pause, drain) | admin (+ apply and delete DAGs, clean history, tokens) | agent')
    .option('--name <name>', 'what it is for, shown in lists', '')
    .option('--agent-pattern <glob>', 'role agent: the agent ids it may say Hello as, e.g. gpu-* or worker-1')
    .option('--expires <duration>', 'lifetime, e.g. 90d, or never', 'never')
    .option(...dbOption)
    .option('-o, --output <format>', 'secret (only the secret, for scripts) | json', 'secret')
    .action(async (opts: Direct & { role: string; name: string; agentPattern?: string; expires: string; output: string }) => {
      const req = { name: opts.name, role: opts.role, agentPattern: opts.agentPattern ?? '', ttlSeconds: ttlSeconds(opts.expires) };
      let t: Token;
      let secret: string;
      if (opts.databaseUrl) {
        const { createApiToken } = await import('../../server/create-api-token.js');
        const { tokenToProto } = await import('../../server/token-service.js');
        const made = await withDatabase(opts.databaseUrl, (sql) => createApiToken(sql, req));
        t = create(TokenSchema, tokenToProto(made.token));
        secret = made.secret;
      } else {
        const res = await clients().tokens.createToken({ ...req, ttlSeconds: BigInt(req.ttlSeconds) });
        t = res.token!;
        secret = res.secret;
      }
      if (opts.output === 'json') process.stdout.write(`${JSON.stringify({ ...tokenJson(t), secret }, null, 2)}\n`);
      else {
        process.stdout.write(`${secret}\n`);
        process.stderr.write(`created token ${t.id} (role ${t.role}${t.agentPattern ? `, agent ids ${t.agentPattern}` : ''}); its secret is above and is not shown again\n`);
      }
    });

  token
    .command('list')
    .description('list tokens (never their secrets)')
    .option(...dbOption)
    .option('-o, --output <format>', 'table | json', 'table')
    .action(async (opts: Direct & { output: string }) => {
      let tokens: Token[];
      if (opts.databaseUrl) {
        const { listApiTokens } = await import('../../db/tokens/api-tokens.js');
        const { tokenToProto } = await import('../../server/token-service.js');
        tokens = (await withDatabase(opts.databaseUrl, listApiTokens)).map((r) => create(TokenSchema, tokenToProto(r)));
      } else {
        tokens = (await clients().tokens.listTokens({})).tokens;
      }
      if (opts.output === 'json') {
        process.stdout.write(`${JSON.stringify(tokens.map(tokenJson), null, 2)}\n`);
        return;
      }
      process.stdout.write(`${table(['ID', 'NAME', 'ROLE', 'AGENTS', 'STATE', 'CREATED', 'EXPIRES'], tokens.map((t) => [t.id, t.name || '-', t.role, t.agentPattern || '-', state(t), time(t.createdAt), t.expiresAt ? time(t.expiresAt) : 'never']))}\n`);
    });

  token
    .command('revoke')
    .description('revoke a token by id: refused from its next call on, on every replica')
    .argument('<id>', 'the token id (see `leoflow token list`)')
    .option(...dbOption)
    .action(async (id: string, opts: Direct) => {
      let revoked: boolean;
      if (opts.databaseUrl) {
        const { revokeApiToken } = await import('../../db/tokens/api-tokens.js');
        const r = await withDatabase(opts.databaseUrl, (sql) => revokeApiToken(sql, id));
        if (r === null) throw new Error(`token ${JSON.stringify(id)} not found`);
        revoked = r;
      } else {
        revoked = (await clients().tokens.revokeToken({ id })).revoked;
      }
      process.stdout.write(revoked ? `revoked token ${id}\n` : `token ${id} was revoked already\n`);
    });
}
