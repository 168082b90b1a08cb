import type { Clients } from '../../src/cli/client.js';
import { waitFor } from '../helpers/leoflow-process.js';

/** Resolves once the server lists a connected agent (polled every 50 ms; throws after 30 s). */
export async function agentConnected(api: Clients): Promise<void> {
  await waitFor(
    'agent connected',
    async () => (await api.cluster.listAgents({})).agents.some((a) => a.connected),
    30_000,
    50,
  );
}
