import { createClients, type Clients } from '../../src/cli/client.js';
import { waitFor, type ServerProcess } from './leoflow-process.js';

/** Two replicas on one database: `a` leading, `b` its standby, with clients of each. */
export interface LeaderAndStandby {
  a: ServerProcess;
  b: ServerProcess;
  apiA: Clients;
  apiB: Clients;
}

/**
 * Starts replica `<prefix>-a`, waits until it leads, then starts `<prefix>-b` (which finds it
 * leading). `launch` starts a server with the file's flags and then the call's own.
 */
export async function leaderAndStandby(
  launch: (extraArgs?: readonly string[]) => Promise<ServerProcess>,
  prefix = 'replica',
): Promise<LeaderAndStandby> {
  const a = await launch(['--replica-id', `${prefix}-a`]);
  const apiA = createClients(a.url);
  await waitFor('a leads', async () => (await apiA.cluster.getLeader({})).leaderId === `${prefix}-a`);
  const b = await launch(['--replica-id', `${prefix}-b`]);
  return { a, b, apiA, apiB: createClients(b.url) };
}
