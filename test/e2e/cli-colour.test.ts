import { spawn } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BIN, cli, ROOT, scratchDir, startAgent, waitFor, type AgentProcess } from '../helpers/leoflow-process.js';
import { serverForFile } from '../helpers/server-fixture.js';

/**
 * Colour by state at a terminal, and none elsewhere (issue 33, item 5): the CLI runs under a
 * pseudo-terminal (util-linux `script`) against a live server, or with its stdout a pipe.
 */

let agent: AgentProcess;
let failedRun: string;

const YAML = `dag_id: colours
tasks:
  - id: ok
    command: ["true"]
  - id: broken
    command: ["sh", "-c", "exit 3"]
  - id: after
    command: ["true"]
    depends_on: [broken]
`;

const GREEN = '\x1b[32m';
const RED = '\x1b[31m';
const RESET = '\x1b[0m';

/** Text as a terminal shows it: escape sequences (colour, cursor moves, erases) and carriage returns removed. */
function plain(s: string): string {
  // eslint-disable-next-line no-control-regex
  return s.replace(/\x1b\[[0-9;?]*[A-Za-z]/g, '').replace(/\r/g, '');
}

/** `leoflow ARGS` at a terminal 100 columns by 40 rows; resolves its exit code and everything it drew. */
function atTerminal(args: string[], env: Record<string, string> = {}): Promise<{ code: number | null; raw: string }> {
  const command = `stty cols 100 rows 40; exec ${process.execPath} ${BIN} --server ${f.server.url} ${args.join(' ')}`;
  const child = spawn('script', ['-qfec', command, '/dev/null'], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, TERM: 'xterm', NO_COLOR: '', ...env },
  });
  let raw = '';
  child.stdout.setEncoding('utf8').on('data', (c: string) => (raw += c));
  child.stderr.setEncoding('utf8').on('data', (c: string) => (raw += c));
  const killer = setTimeout(() => child.kill('SIGKILL'), 40_000);
  return new Promise((resolve) =>
    child.on('exit', (code) => {
      clearTimeout(killer);
      resolve({ code, raw });
    }),
  );
}

const f = serverForFile();

beforeAll(async () => {
  const file = path.join(scratchDir('leoflow-colour-'), 'colours.yaml');
  await writeFile(file, YAML);
  expect((await cli(f.server.url, ['dag', 'apply', file])).code).toBe(0);
  agent = startAgent(f.server.url, ['--id', 'painter']);
  await waitFor('the agent connected', async () =>
    (await cli(f.server.url, ['agents', 'list', '-o', 'json'])).stdout.includes('"connected":true'),
  );
}, 60_000);

afterAll(async () => {
  await agent?.stop();
});

describe('at a terminal', () => {
  it('run trigger --wait shows the live run watch view, coloured, then the outcome, and exits 1 for a failed run', async () => {
    const { code, raw } = await atTerminal(['run', 'trigger', 'colours', '--wait']);
    expect(code, raw).toBe(1);
    const text = plain(raw);
    failedRun = /^run (\d+) of colours triggered/m.exec(text)![1]!;
    // The live view's last frame: header, full bar, the table; then the one-line outcome.
    const lastFrame = text.slice(text.lastIndexOf(`run ${failedRun} of colours:`));
    expect(lastFrame).toMatch(
      new RegExp(
        `^run ${failedRun} of colours: failed\\n\\[#{40}\\] 3/3 tasks ended\\nTASK\\s+STATE\\s+TRY\\s+DURATION\\s+WHY\\n`,
      ),
    );
    expect(lastFrame).toMatch(/^ok {6}success {10}1\/1/m);
    expect(lastFrame).toMatch(/^broken {2}failed {11}1\/1/m);
    expect(lastFrame).toMatch(/^after {3}upstream_failed {2}-/m);
    expect(lastFrame).toMatch(new RegExp(`^run ${failedRun} failed in \\d+\\.\\ds: `, 'm'));
    // Colour by state, each cell reset after its word.
    expect(raw).toContain(`${GREEN}success${RESET}`);
    expect(raw).toContain(`${RED}failed${RESET}`);
    expect(raw).toContain(`${RED}upstream_failed${RESET}`);
  });

  it('colours run show, run list and agents list, keeping their columns aligned', async () => {
    const show = await atTerminal(['run', 'show', failedRun]);
    expect(show.code).toBe(0);
    expect(show.raw).toContain(`state ${RED}failed${RESET}`);
    expect(show.raw).toMatch(new RegExp(`\\nok {6}${esc(GREEN)}success${esc(RESET)} {10}1/1`));
    const list = await atTerminal(['run', 'list']);
    expect(list.raw).toMatch(new RegExp(`\\n${failedRun} +colours +${esc(RED)}failed${esc(RESET)} +manual`));
    // Columns after a coloured cell start where the header's do.
    const [header, row] = plain(list.raw).split('\n');
    expect(row).toMatch(new RegExp(`^${failedRun} +colours +failed +manual`));
    expect(row!.indexOf('manual')).toBe(header!.indexOf('TYPE'));
    const agents = await atTerminal(['agents', 'list']);
    expect(agents.raw).toMatch(new RegExp(`\\npainter +${esc(GREEN)}healthy${esc(RESET)} +yes`));
    const [agentHeader, agentRow] = plain(agents.raw).split('\n');
    expect(agentRow).toMatch(/^painter +healthy +yes/);
    expect(agentRow!.indexOf('yes')).toBe(agentHeader!.indexOf('CONNECTED'));
  });

  it('leaves colour out with NO_COLOR set, and with -o json', async () => {
    const noColour = await atTerminal(['run', 'show', failedRun], { NO_COLOR: '1' });
    expect(noColour.code).toBe(0);
    expect(noColour.raw).toMatch(/state failed,/);
    expect(noColour.raw).not.toContain('\x1b[');
    const json = await atTerminal(['run', 'show', failedRun, '-o', 'json']);
    expect(json.raw).not.toContain('\x1b[');
    expect(JSON.parse(plain(json.raw)).state).toBe('failed');
  });
});

describe('when stdout is not a terminal', () => {
  it('writes no colour, and run trigger --wait keeps a line per move', async () => {
    const show = await cli(f.server.url, ['run', 'show', failedRun]);
    expect(show.stdout).toMatch(/state failed,/);
    expect(show.stdout).not.toContain('\x1b[');
    const wait = await cli(f.server.url, ['run', 'trigger', 'colours', '--wait']);
    expect(wait.code).toBe(1);
    expect(wait.stdout).not.toContain('\x1b[');
    expect(wait.stdout).toMatch(/^ {2}\d\d:\d\d:\d\d\.\d{3} {2}broken +failed +try 1\/1, exit 3/m);
    expect(wait.stdout).toMatch(/^run \d+ failed in \d+\.\ds: /m);
  });
});

it('dag show draws the shape of the DAG', async () => {
  const r = await cli(f.server.url, ['dag', 'show', 'colours']);
  expect(r.code).toBe(0);
  expect(r.stdout).toContain('\n\nok   broken\n     │\n     ▼\n     after\n\nTASK');
});

function esc(s: string): string {
  return s.replace(/[[\]\\^$.|?*+()]/g, '\\$&');
}
