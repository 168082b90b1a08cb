import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import http2 from 'node:http2';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import {
  BIN,
  cli,
  ROOT,
  runCommand,
  scratchDir,
  startServer,
  type CliResult,
  type ServerProcess,
} from '../helpers/leoflow-process.js';
import { makeTestPki, type TestPki } from '../helpers/test-certs.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';

/**
 * The first hour's mistakes (issue 33, item 2), made as a user makes them, with the real CLI and
 * server: each gets one clear error naming the argument or flag, the value and the fix, never a
 * stack or an internal error.
 */

/** No stack trace, no internal error, no "BigInt" leaking from a serializer. */
function clean(stderr: string): void {
  expect(stderr).not.toMatch(/^\s+at /m);
  expect(stderr).not.toMatch(/internal|BigInt/i);
}

describe('arguments checked before anything is sent', () => {
  // A server that is not there: a checked argument must fail before any connection is tried.
  const nowhere = 'http://127.0.0.1:9';

  it('refuses a run id that is not one, naming the argument, the value and where ids come from', async () => {
    for (const args of [
      ['run', 'show', 'abc'],
      ['run', 'watch', '1.5'],
      ['run', 'cancel', '0'],
      ['run', 'clear', 'x7', 'task'],
      ['logs', '99999999999999999999'],
    ]) {
      const r = await cli(nowhere, args);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr).toContain(
        `value '${args[2] ?? args[1]}' is invalid for argument 'run_id'. A run id is a positive integer, as \`leoflow run list\` shows`,
      );
      expect(r.stderr).not.toMatch(/cannot reach/);
      clean(r.stderr);
      // A pointer to the command's help, not the whole help.
      expect(r.stderr.trim().split('\n')).toHaveLength(2);
    }
  });

  it('refuses numeric flags out of range: --try, --after', async () => {
    const t = await cli(nowhere, ['logs', '5', '--try', '0']);
    expect(t.code).toBe(2);
    expect(t.stderr).toMatch(
      /^error: option '--try <n>' argument '0' is invalid\. A try number is an integer from 1 to 2147483647\.\n\(see `leoflow logs --help`\)\n$/,
    );
    const a = await cli(nowhere, ['run', 'watch', '5', '--after', 'last']);
    expect(a.code).toBe(2);
    expect(a.stderr).toMatch(
      /option '--after <seq>' argument 'last' is invalid\. A seq is 0 \(from the start\) or a positive integer/,
    );
  });
});

describe('unknown commands', () => {
  it('points a verb typed at the top to the command that has it, with the same arguments, in a few lines', async () => {
    const r = await cli(null, ['trigger', 'hello', '--wait']);
    expect(r.code).toBe(2);
    expect(r.stderr).toBe(
      "error: unknown command 'trigger'\ndid you mean: leoflow run trigger hello --wait\n(see `leoflow --help`)\n",
    );
    for (const [args, want] of [
      [['cancel', '7'], 'leoflow run cancel 7'],
      [['clear', '7', 'extract'], 'leoflow run clear 7 extract'],
      [['watch', '7'], 'leoflow run watch 7'],
      [['apply', 'examples/'], 'leoflow dag apply examples/'],
      [['pause', 'etl'], 'leoflow dag pause etl'],
      [['run', 'logs', '7'], 'leoflow logs 7'],
      [['dag', 'trigger', 'etl'], 'leoflow run trigger etl'],
    ] as const) {
      const u = await cli(null, [...args]);
      expect(u.code).toBe(2);
      expect(u.stderr).toContain(`did you mean: ${want}\n`);
    }
  });

  it('lists every place of a verb that several commands have, the likeliest first', async () => {
    const run = await cli(null, ['show', '7']);
    expect(run.stderr).toBe(
      "error: unknown command 'show'\ndid you mean one of:\n  leoflow run show 7\n  leoflow dag show 7\n(see `leoflow --help`)\n",
    );
    const dag = await cli(null, ['show', 'etl']);
    expect(dag.stderr).toContain('did you mean one of:\n  leoflow dag show etl\n  leoflow run show etl\n');
    const list = await cli(null, ['list']);
    expect(list.stderr).toMatch(
      /did you mean one of:\n {2}leoflow dag list\n {2}leoflow run list\n {2}leoflow notifications list\n {2}leoflow agents list\n/,
    );
  });

  it('suggests by spelling where no command has the word', async () => {
    const r = await cli(null, ['run', 'trgger', 'hello']);
    expect(r.code).toBe(2);
    expect(r.stderr).toBe("error: unknown command 'trgger'\n(Did you mean trigger?)\n(see `leoflow run --help`)\n");
  });
});

it('prints the version from package.json with --version and -V', async () => {
  const { version } = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { version: string };
  for (const flag of ['--version', '-V']) {
    const r = await cli(null, [flag]);
    expect(r).toEqual({ code: 0, stdout: `${version}\n`, stderr: '' });
  }
});

/** The CLI with its stdout's reader gone before it writes (`leoflow … | head` once head has exited). */
function withClosedStdout(server: string, args: string[]): Promise<CliResult> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [BIN, '--server', server, ...args], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child.stdout.destroy();
    let stderr = '';
    child.stderr.setEncoding('utf8').on('data', (c: string) => (stderr += c));
    const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout: '', stderr });
    });
  });
}

describe('against a live server', () => {
  let db: TestDatabase;
  let server: ServerProcess;
  let doneRun: string;
  const YAML = `dag_id: talk
tasks:
  - id: lines
    command: ["sh", "-c", "for i in $(seq 1 200); do echo line $i; done"]
  - id: slow
    command: ["sh", "-c", "for i in $(seq 1 100); do echo tick $i; sleep 0.1; done"]
`;

  beforeAll(async () => {
    db = await createTestDatabase();
    server = await startServer({ env: { DATABASE_URL: db.url } });
    const file = path.join(scratchDir('leoflow-cli-errors-'), 'talk.yaml');
    await writeFile(file, YAML);
    expect((await cli(server.url, ['dag', 'apply', file])).code).toBe(0);
    const c = createClients(server.url);
    doneRun = (await c.workflow.triggerRun({ dagId: 'talk', confJson: '', runKey: '' })).run!.runId;
    // The first task's 200 lines are all in before the tests read them.
    for (;;) {
      const { taskInstances } = await c.workflow.getRun({ runId: doneRun });
      if (taskInstances.find((t) => t.taskId === 'lines')?.endedAt) break;
      await new Promise((r) => setTimeout(r, 100));
    }
  }, 60_000);

  afterAll(async () => {
    await server?.stop();
    await db?.drop();
  });

  it('ends quietly, status 0, when stdout is closed (logs, logs -f, run watch -o json)', async () => {
    for (const args of [
      ['logs', doneRun],
      ['logs', doneRun, '-f'],
      ['run', 'watch', doneRun, '-o', 'json', '--follow'],
      ['run', 'list'],
    ]) {
      const started = Date.now();
      const r = await withClosedStdout(server.url, args);
      expect({ args, code: r.code, stderr: r.stderr }).toEqual({ args, code: 0, stderr: '' });
      // A followed stream ends at its first write, not when the run does (the slow task takes 10 s).
      expect(Date.now() - started).toBeLessThan(8_000);
    }
  });

  it('answers INVALID_ARGUMENT, naming the field, to a bad run id sent by another client (Connect JSON)', async () => {
    const session = http2.connect(server.url);
    try {
      for (const runId of ['abc', '-3', '1.5', '99999999999999999999']) {
        const { status, body } = await new Promise<{ status: number; body: string }>((resolve, reject) => {
          const req = session.request({
            ':method': 'POST',
            ':path': '/leoflow.v1.WorkflowService/GetRun',
            'content-type': 'application/json',
          });
          let body = '';
          let status = 0;
          req.on('response', (h) => (status = Number(h[':status'])));
          req.setEncoding('utf8').on('data', (c: string) => (body += c));
          req.on('end', () => resolve({ status, body }));
          req.on('error', reject);
          req.end(JSON.stringify({ runId }));
        });
        expect(status, body).toBe(400);
        const err = JSON.parse(body) as { code: string; message: string };
        expect(err.code).toBe('invalid_argument');
        expect(err.message).toMatch(/run_id/);
        expect(err.message).toContain(runId);
      }
    } finally {
      session.close();
    }
  });

  it('says to use http:// when https:// reaches this plain port', async () => {
    const r = await cli(server.url.replace(/^http:/, 'https:'), ['run', 'list']);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe(
      `leoflow: the server at ${server.url.replace(/^http:/, 'https:')} does not speak TLS: use --server ${server.url} (ERR_SSL_WRONG_VERSION_NUMBER)\n`,
    );
  });

  it('names the flag, the address and the fix when a port is taken, and exits 1 without a stack', async () => {
    const port = new URL(server.url).port;
    const metricsPort = new URL(server.metricsUrl).port;
    const start = (args: string[]) =>
      runCommand(
        process.execPath,
        [BIN, 'server', '--state-dir', scratchDir('leoflow-state-'), '--log-format', 'json', ...args],
        { env: { DATABASE_URL: db.url, LEOFLOW_INSECURE: 'true' }, timeoutMs: 30_000 },
      );
    const metrics = await start(['--listen', '127.0.0.1:0', '--metrics-listen', `127.0.0.1:${port}`]);
    expect(metrics.code).toBe(1);
    expect(metrics.stderr).toBe(
      `leoflow server: could not start: --metrics-listen 127.0.0.1:${port}: the address is in use by another process (another leoflow server?): ` +
        'stop it, or choose a free port with --metrics-listen HOST:PORT (or off)\n',
    );
    const api = await start(['--listen', `127.0.0.1:${metricsPort}`, '--metrics-listen', 'off']);
    expect(api.code).toBe(1);
    expect(api.stderr).toBe(
      `leoflow server: could not start: --listen 127.0.0.1:${metricsPort}: the address is in use by another process (another leoflow server?): stop it, or choose a free port with --listen HOST:PORT\n`,
    );
    // The first server is still answering.
    expect((await cli(server.url, ['run', 'list'])).code).toBe(0);
  }, 60_000);
});

describe('a TLS server', () => {
  let pki: TestPki;
  let db: TestDatabase;
  let server: ServerProcess;
  beforeAll(async () => {
    pki = makeTestPki();
    db = await createTestDatabase();
    server = await startServer({
      env: { DATABASE_URL: db.url },
      args: ['--tls-cert', pki.server.cert, '--tls-key', pki.server.key],
    });
  }, 60_000);
  afterAll(async () => {
    await server?.stop();
    await db?.drop();
    pki?.remove();
  });

  it('says to use https:// when plain http:// reaches it', async () => {
    const r = await cli(server.url, ['run', 'list']);
    expect(r.code).toBe(1);
    const https = server.url.replace(/^http:/, 'https:');
    expect(r.stderr).toMatch(
      new RegExp(
        `^leoflow: the server at ${server.url} speaks TLS, and this plain http:// connection was refused \\(.+\\): use --server ${https}\\n$`,
      ),
    );
  });
});
