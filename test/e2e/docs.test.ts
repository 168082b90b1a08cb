import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { cp, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { docBlocks, docCommands, outputMismatch, type DocCommand } from '../helpers/doc-blocks.js';
import { freePort } from '../helpers/global-setup.js';
import {
  BIN,
  cli,
  ROOT,
  startServer,
  stopLeftEmbeddedPostgres,
  type ServerProcess,
} from '../helpers/leoflow-process.js';

/**
 * The README and the user guide, run as a reader runs them: `npm start`'s server (Lite, the
 * examples, its own embedded Postgres, no token), then every `$ ` line of their `console` blocks
 * in page order, README first, with `leoflow` on the PATH and the files the pages show written
 * where the commands find them. Each command's exit code and the shape of its output must be
 * what the page shows. A restart at the end keeps every DAG, run and log.
 */

const PAGES = ['README.md', 'docs/guide.md'];

let work: string;
let stateDir: string;
let startArgs: string[];
const servers: ServerProcess[] = [];

beforeAll(async () => {
  work = await mkdtemp(path.join(os.tmpdir(), 'leoflow-docs-'));
  stateDir = path.join(work, 'state');
  await mkdir(path.join(work, 'bin'));
  await symlink(BIN, path.join(work, 'bin', 'leoflow'));
  await cp(path.join(ROOT, 'examples'), path.join(work, 'examples'), { recursive: true });
  for (const page of PAGES) {
    for (const b of docBlocks(page)) if (b.marks.file) await writeFile(path.join(work, b.marks.file), b.text);
  }
  // What `npm start` runs, from package.json, so the test follows the README's command.
  const pkg = JSON.parse(await readFile(path.join(ROOT, 'package.json'), 'utf8')) as { scripts: { start: string } };
  const start = pkg.scripts.start.split(/\s+/);
  expect(start.slice(0, 3)).toEqual(['node', 'bin/leoflow.js', 'server']);
  startArgs = start.slice(3);
});

afterAll(async () => {
  for (const s of servers) await s.kill();
  stopLeftEmbeddedPostgres();
  await rm(work, { recursive: true, force: true });
});

async function startAsUser(): Promise<ServerProcess> {
  const args = [...startArgs, '--state-dir', stateDir, '--embedded-pg-port', String(await freePort())];
  // A user's environment: no database URL, no edition, and not open by flag (Lite on loopback is).
  const env = { DATABASE_URL: undefined, LEOFLOW_EDITION: undefined, LEOFLOW_INSECURE: undefined };
  const server = await startServer({ args, env, readyTimeoutMs: 60_000 });
  servers.push(server);
  return server;
}

function runShell(command: string, server: string): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      PATH: `${path.join(work, 'bin')}:${process.env.PATH}`,
      LEOFLOW_SERVER: server,
    };
    for (const k of ['LEOFLOW_TOKEN', 'LEOFLOW_CA_FILE', 'DATABASE_URL']) delete env[k];
    const child = spawn('bash', ['-o', 'pipefail', '-c', `${command} 2>&1`], {
      cwd: work,
      env,
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let output = '';
    child.stdout.setEncoding('utf8').on('data', (c: string) => (output += c));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`"${command}" took longer than 60 s:\n${output}`));
    }, 60_000);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, output });
    });
  });
}

/** Runs one documented command; a `retry` block's read is repeated until it shows what the page does. */
async function check(c: DocCommand, server: string): Promise<void> {
  const where = `${c.block.file}:${c.block.line}: $ ${c.command}`;
  const deadline = Date.now() + (c.block.marks.retry ? 20_000 : 0);
  for (;;) {
    const r = await runShell(c.command, server);
    const mismatch =
      r.code !== c.block.marks.exit
        ? `exit code ${r.code}, the page says ${c.block.marks.exit}`
        : outputMismatch(c.output, r.output, c.block.marks.loose, c.block.marks);
    if (mismatch === null) return;
    if (Date.now() > deadline) expect.fail(`${where}\n${mismatch}\n--- real output ---\n${r.output}`);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

describe("the README's CLI at a glance", () => {
  it('names only commands the CLI has', { timeout: 300_000 }, async () => {
    const readme = readFileSync(path.join(ROOT, 'README.md'), 'utf8');
    const block = /## The CLI at a glance\n+```\n([\s\S]*?)```/.exec(readme)![1]!;
    const commands = new Set<string>();
    for (const line of block.split('\n').filter((l) => l.startsWith('leoflow '))) {
      const words: string[][] = [];
      for (const w of line.split(/\s+/).slice(1)) {
        if (!/^[a-z][a-z|]*$/.test(w)) break;
        words.push(w.split('|'));
      }
      // `dag pause|unpause` is two commands.
      const expand = (i: number): string[][] =>
        i === words.length ? [[]] : words[i]!.flatMap((w) => expand(i + 1).map((rest) => [w, ...rest]));
      for (const c of expand(0)) if (c.length > 0) commands.add(c.join(' '));
    }
    expect(commands.size).toBeGreaterThan(15);
    // The commands the CLI has, from its help: the top level's, then each group's.
    const listed = async (args: string[]) => {
      const r = await cli(null, [...args, '--help']);
      expect(r.code, r.stderr).toBe(0);
      const section = r.stdout.split(/^Commands:$/m)[1] ?? '';
      return new Set([...section.matchAll(/^ {2}([a-z][a-z-]*)/gm)].map((m) => m[1]!).filter((c) => c !== 'help'));
    };
    const top = await listed([]);
    const groups = new Map<string, Set<string>>();
    for (const c of commands) {
      const [group, sub] = c.split(' ');
      expect(top, `leoflow ${group}`).toContain(group);
      if (sub === undefined) continue;
      if (!groups.has(group!)) groups.set(group!, await listed([group!]));
      expect(groups.get(group!), `leoflow ${c}`).toContain(sub);
    }
  });
});

describe('the README and the guide, run against a real server', () => {
  it('every command block does what the page shows, and a restart keeps it all', async () => {
    const server = await startAsUser();
    const commands = PAGES.flatMap((p) => docCommands(p));
    expect(commands.length).toBeGreaterThan(10);
    for (const c of commands) await check(c, server.url);

    // Stopped like Ctrl-C and started again on the same state directory: nothing is lost.
    const before = JSON.parse(
      (await cli(server.url, ['run', 'list', '-o', 'json', '--limit', '100'])).stdout,
    ) as unknown[];
    expect((await server.stop()).code).toBe(0);
    const again = await startAsUser();
    const after = JSON.parse(
      (await cli(again.url, ['run', 'list', '-o', 'json', '--limit', '100'])).stdout,
    ) as unknown[];
    expect(after).toEqual(before);
    expect((await cli(again.url, ['logs', '1', '--task', 'greet'])).stdout).toMatch(
      /^\[greet #1\] Hello from Leoflow!/m,
    );
    // Re-applying the unchanged examples at start-up is a no-op: still version 1.
    expect((await cli(again.url, ['dag', 'list'])).stdout).toMatch(/^hello\s+1\s/m);
    expect((await again.stop()).code).toBe(0);
  }, 600_000);
});
