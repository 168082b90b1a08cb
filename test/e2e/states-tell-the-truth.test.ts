import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';
import { cli, startServer, waitFor, type ServerProcess } from '../helpers/leoflow-process.js';

/**
 * Every state tells the truth (issue 33), as a user of Lite sees it with the real server and CLI
 * at their defaults: each try's log starts with its `started` line.
 */

let db: TestDatabase;
let server: ServerProcess;
let tmp: string;

const WIDE = `dag_id: wide
tasks:
${['a', 'b', 'c', 'd', 'e'].map((t) => `  - id: ${t}\n    command: ["sh", "-c", "echo ${t}-err >&2; echo ${t}-out"]`).join('\n')}
`;

function runIdOf(stdout: string): string {
  const m = /^run (\d+) of /m.exec(stdout);
  if (!m) throw new Error(`no run id in: ${stdout}`);
  return m[1]!;
}

beforeAll(async () => {
  db = await createTestDatabase();
  tmp = await mkdtemp(path.join(os.tmpdir(), 'leoflow-truth-'));
  await writeFile(path.join(tmp, 'wide.yaml'), WIDE);
  server = await startServer({ env: { DATABASE_URL: db.url } });
  const r = await cli(server.url, ['dag', 'apply', tmp]);
  expect(r.code, r.stderr).toBe(0);
}, 60_000);

afterAll(async () => {
  await server?.stop();
  await db?.drop();
  await rm(tmp, { recursive: true, force: true });
});

describe('every state tells the truth', () => {
  it("prints each try's `started` line first in `leoflow logs`, then its output", async () => {
    for (let i = 0; i < 6; i++) {
      const t = await cli(server.url, ['run', 'trigger', 'wide', '--wait']);
      expect(t.code, t.stdout + t.stderr).toBe(0);
      const runId = runIdOf(t.stdout);
      const logs = await cli(server.url, ['logs', runId]);
      expect(logs.code, logs.stderr).toBe(0);
      for (const task of ['a', 'b', 'c', 'd', 'e']) {
        const mine = logs.stdout.split('\n').filter((l) => l.startsWith(`[${task} #1`));
        expect(mine[0], logs.stdout).toMatch(new RegExp(`^\\[${task} #1 leoflow\\] started pid \\d+: `));
        expect(mine.slice(1, 3).sort()).toEqual([`[${task} #1 stderr] ${task}-err`, `[${task} #1] ${task}-out`]);
        expect(mine.at(-1)).toBe(`[${task} #1 leoflow] exited with code 0`);
      }
    }
  }, 150_000);
});
