import { startServer, type ServerProcess } from './leoflow-process.js';

/**
 * A Pro server with auth on (the test helpers run servers open unless told otherwise) on the
 * subprocess executor, `admin` its bootstrap admin token; `args` follow those flags.
 */
export function startProWithAuth(databaseUrl: string, admin: string, args: string[] = []): Promise<ServerProcess> {
  return startServer({
    env: { DATABASE_URL: databaseUrl, LEOFLOW_INSECURE: undefined, LEOFLOW_AGENT_TOKEN: undefined },
    args: ['--edition', 'pro', '--executor', 'subprocess', '--bootstrap-admin-token', admin, ...args],
  });
}
