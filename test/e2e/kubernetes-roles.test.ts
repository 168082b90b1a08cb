import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli, startServer, type ServerProcess } from '../helpers/leoflow-process.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';

/**
 * A Pro replica that never leads (a worker or an observer) never dispatches, so it needs no
 * kubeconfig: it starts and serves with none to read, beside a database a leader migrated.
 */

let db: TestDatabase;
const servers: ServerProcess[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
}, 60_000);

afterAll(async () => {
  for (const s of servers) await s.stop();
  await db?.drop();
});

describe('workers and observers of the kubernetes executor', () => {
  for (const role of ['worker', 'observer']) {
    it(`a ${role} starts and serves with no kubeconfig to read`, { timeout: 60_000 }, async () => {
      const server = await startServer({
        env: { DATABASE_URL: db.url, KUBECONFIG: undefined, KUBERNETES_SERVICE_HOST: undefined },
        args: [
          '--edition',
          'pro',
          '--insecure',
          '--role',
          role,
          '--kubeconfig',
          '/nonexistent/kubeconfig',
          '--kubernetes-image',
          'leoflow:test',
        ],
      });
      servers.push(server);
      const r = await cli(server.url, ['status']);
      expect(r.code, r.stderr).toBe(0);
    });
  }
});
