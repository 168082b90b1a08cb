import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import { BIN, startServer, waitFor, type ServerProcess } from '../helpers/leoflow-process.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';

/**
 * Issue 38, item 7: a client that stops following a run's logs (Ctrl-C on `leoflow logs -f`, or
 * an aborted call) is an ordinary end of a call. The server notes it at debug; it is not an error
 * with a stack.
 */

const ADMIN = randomBytes(32).toString('base64url');
let db: TestDatabase;
let s: ServerProcess;

beforeAll(async () => {
  db = await createTestDatabase();
  const dagFile = path.join(os.tmpdir(), `leoflow-tail-cancel-${process.pid}.yaml`);
  await writeFile(
    dagFile,
    // Many lines at once, then quiet: a follow has batches still to write when its client goes.
    'dag_id: talker\ntasks:\n  - {id: a, command: ["sh", "-c", "seq 1 30000; sleep 120"]}\n',
  );
  // The setup a user gets: tokens on (no LEOFLOW_INSECURE), every bound at its default.
  s = await startServer({
    env: { DATABASE_URL: db.url, LEOFLOW_INSECURE: undefined, LEOFLOW_AGENT_TOKEN: undefined },
    args: ['--edition', 'pro', '--executor', 'subprocess', '--bootstrap-admin-token', ADMIN, '--dags', dagFile],
  });
});
afterAll(async () => {
  await s?.kill();
  await db?.drop();
});

describe('TailLogs follow, cancelled by its client', () => {
  it('logs nothing at error level when the client aborts mid-follow', async () => {
    const admin = createClients(s.url, null, ADMIN);
    const viewer = createClients(s.url, null, (await admin.tokens.createToken({ name: 'v', role: 'viewer' })).secret);
    const runId = (await admin.workflow.triggerRun({ dagId: 'talker' })).run!.runId;
    await waitFor('the task to have written its lines', async () => {
      let n = 0;
      for await (const m of viewer.workflow.tailLogs({ runId })) n += m.lines.length;
      return n >= 30_000;
    });
    for (let round = 0; round < 5; round++) {
      const from = s.logs.length;
      const ac = new AbortController();
      let got = 0;
      await expect(
        (async () => {
          for await (const m of viewer.workflow.tailLogs({ runId, follow: true }, { signal: ac.signal })) {
            got += m.lines.length;
            // Mid-follow: after the first lines, while the task still talks.
            if (got > 0) ac.abort();
          }
        })(),
      ).rejects.toThrow();
      expect(got).toBeGreaterThan(0);
      // The server sees the stream end; give it time to log what it logs of it.
      await new Promise((r) => setTimeout(r, 500));
      const bad = s.logs.slice(from).filter((l) => Number(l.level) >= 50);
      expect(bad, JSON.stringify(bad).slice(0, 2000)).toEqual([]);
    }
  }, 60_000);

  it.each(['SIGINT', 'SIGKILL'] as const)(
    'logs nothing at error level when `leoflow logs -f` ends by %s',
    async (signal) => {
      const admin = createClients(s.url, null, ADMIN);
      const secret = (await admin.tokens.createToken({ name: `v-${signal}`, role: 'viewer' })).secret;
      const runId = (await admin.workflow.triggerRun({ dagId: 'talker' })).run!.runId;
      for (let round = 0; round < 3; round++) {
        const from = s.logs.length;
        const child = spawn(process.execPath, [BIN, '--server', s.url, 'logs', runId, '-f'], {
          env: { ...process.env, LEOFLOW_TOKEN: secret },
          stdio: ['ignore', 'pipe', 'pipe'],
        });
        try {
          await new Promise<void>((resolve, reject) => {
            const t = setTimeout(() => reject(new Error('no log line from `leoflow logs -f` in 15 s')), 15_000);
            child.stdout.on('data', () => (clearTimeout(t), resolve()));
          });
          const exited = new Promise((r) => child.once('exit', r));
          child.kill(signal);
          await exited;
        } finally {
          if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
        }
        await new Promise((r) => setTimeout(r, 500));
        const bad = s.logs.slice(from).filter((l) => Number(l.level) >= 50);
        expect(bad, JSON.stringify(bad).slice(0, 2000)).toEqual([]);
      }
    },
    90_000,
  );
});
