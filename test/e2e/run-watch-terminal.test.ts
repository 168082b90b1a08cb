import { spawn } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import { BIN, cli, ROOT, scratchDir, startAgent, waitFor, type AgentProcess } from '../helpers/leoflow-process.js';
import { serverForFile } from '../helpers/server-fixture.js';

/**
 * `leoflow run watch` in a terminal (issue 26): the CLI runs under a pseudo-terminal (util-linux
 * `script`), against a live server, and what it draws is read back frame by frame: the tasks with
 * their state, try, duration and pending reason, the progress bar, and the end of the run, after
 * which the command exits by itself.
 */

let agent: AgentProcess | null = null;

// `slow` runs until the view has drawn it running (the test then creates the file it waits for:
// a CLI slow to start on a loaded machine cannot miss it), then 1.5 s more; `gpu` waits for an
// agent with its label, which joins only once the view has shown why it waits.
const GO = path.join(scratchDir('leoflow-tty-go-'), 'go');
const YAML = `dag_id: tty
tasks:
  - id: slow
    command: ["sh", "-c", "while [ ! -e ${GO} ]; do sleep 0.05; done; sleep 1.5"]
  - id: gpu
    executor: agents
    command: ["true"]
    placement: { labels: { gpu: nvidia } }
  - id: last
    command: ["true"]
    depends_on: [slow, gpu]
`;

const f = serverForFile();

beforeAll(async () => {
  const dir = scratchDir('leoflow-tty-');
  await writeFile(path.join(dir, 'tty.yaml'), YAML);
  const r = await cli(f.server.url, ['dag', 'apply', path.join(dir, 'tty.yaml')]);
  expect(r.code, r.stderr).toBe(0);
}, 60_000);

afterAll(async () => {
  await agent?.stop();
});

/** Text as a terminal would show it, near enough to match on: escape sequences (colour, cursor moves, erases) removed. */
function plain(s: string): string {
  // eslint-disable-next-line no-control-regex
  return s
    .replace(/\x1b\[[0-9;?]*[A-Za-z]/g, '')
    .replace(/\x1b[()][A-Z0-9]/g, '')
    .replace(/\r/g, '');
}

describe('run watch in a terminal', () => {
  it('draws the tasks (state, try, duration, pending reason) and a progress bar, redrawn live, and exits when the run ends', async () => {
    const { run } = await createClients(f.server.url).workflow.triggerRun({ dagId: 'tty', confJson: '', runKey: '' });
    const runId = run!.runId;
    // A terminal 100 columns wide; `script -e` exits with the command's code, `-f` flushes each write.
    const command = `stty cols 100 rows 40; exec ${process.execPath} ${BIN} --server ${f.server.url} run watch ${runId}`;
    const child = spawn('script', ['-qfec', command, '/dev/null'], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, TERM: 'xterm' },
    });
    let raw = '';
    child.stdout.setEncoding('utf8').on('data', (c: string) => (raw += c));
    child.stderr.setEncoding('utf8').on('data', (c: string) => (raw += c));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    const killer = setTimeout(() => child.kill('SIGKILL'), 40_000);
    try {
      // The waiting task is drawn with why it waits, before any agent could take it.
      await waitFor(
        'the pending reason drawn',
        async () => /^gpu\s+scheduled\s+-\s+-\s+NO_AGENT_WITH_LABELS:gpu=nvidia$/m.test(plain(raw)),
        20_000,
        50,
      );
      // A frame with the slow task running on its first try, its duration going.
      await waitFor(
        'the slow task drawn running',
        async () => /^slow\s+running\s+1\/1\s+\d+(ms|\.\ds)$/m.test(plain(raw)),
        20_000,
        50,
      );
      await writeFile(GO, '');
      agent = startAgent(f.server.url, ['--id', 'tty-gpu', '--labels', 'gpu=nvidia']);
      const code = await exited;
      const out = plain(raw);
      expect(code, out).toBe(0);
      // The header, the bar moving from none ended to all ended, and the last frame's table.
      expect(out).toMatch(new RegExp(`^run ${runId} of tty: (queued|running)$`, 'm'));
      expect(out).toMatch(/^\[-{40}\] 0\/3 tasks ended$/m);
      expect(out).toMatch(/^\[#{13}-{27}\] 1\/3 tasks ended$/m);
      const lastFrame = out.slice(out.lastIndexOf(`run ${runId} of tty:`));
      expect(lastFrame).toMatch(
        new RegExp(
          `^run ${runId} of tty: success\\n\\[#{40}\\] 3/3 tasks ended\\nTASK\\s+STATE\\s+TRY\\s+DURATION\\s+WHY\\n`,
        ),
      );
      for (const t of ['slow', 'gpu', 'last'])
        expect(lastFrame).toMatch(new RegExp(`^${t}\\s+success\\s+1/1\\s+\\d`, 'm'));
      // The slow task's duration is its wall time: at least its last sleep.
      const slowSecs = Number(/^slow\s+success\s+1\/1\s+(\d+\.\d)s$/m.exec(lastFrame)?.[1]);
      expect(slowSecs).toBeGreaterThanOrEqual(1.5);
    } finally {
      clearTimeout(killer);
      if (child.exitCode === null) child.kill('SIGKILL');
    }
  }, 60_000);
});
