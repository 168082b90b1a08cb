import { createClient, createRouterTransport, type Client } from '@connectrpc/connect';
import pino from 'pino';
import { migrate } from '../../db/migrate.js';
import { createSql } from '../../db/sql.js';
import { TokenService } from '../../gen/leoflow/v1/token_pb.js';
import { createTokenService } from './token-service.js';

/**
 * TokenService served in this process, on a database given by URL (`leoflow token --database-url`):
 * the way to the first admin token, for whoever holds the database's credentials, before any
 * token exists or any server runs. The same service the API serves, through an in-memory
 * transport, so the two ways cannot drift apart. The migrations run first.
 */
export async function directTokenService(
  url: string,
): Promise<{ client: Client<typeof TokenService>; close(): Promise<void> }> {
  const sql = createSql(url, { max: 1, applicationName: 'leoflow-token' });
  try {
    await migrate(sql);
  } catch (err) {
    await sql.end({ timeout: 5 });
    throw err;
  }
  const service = createTokenService({ sql, logger: pino({ level: 'silent' }) });
  const transport = createRouterTransport(({ service: serve }) => serve(TokenService, service));
  return { client: createClient(TokenService, transport), close: () => sql.end({ timeout: 5 }) };
}
