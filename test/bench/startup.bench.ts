import { spawn, spawnSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import { freePort } from '../helpers/global-setup.js';
import { BIN, cli, startServer } from '../helpers/leoflow-process.js';
import { createTestDatabase } from '../helpers/test-database.js';
import { reportRatios } from './ratios.js';
import { percentile, report } from './report.js';

/**
 * How long a user waits: `leoflow server` (Lite, embedded Postgres, examples applied) from spawn
 * to "ready", cold (new state dir: initdb) and warm; a hello run from trigger to success; and the
 * CLI's own start (`--help`; `run list` with no server, a fast error; `dag list` against the
 * server). Read against two yardsticks measured in the same run: a bare `node -e 0` start-up and
 * a `spawn('true')` until exit.
 */

function nodeStartupMs(n: number): number[] {
  return spawnMs(n, ['-e', '0']);
}

/** `node ARGS` from spawn to exit, n times; a `leoflow` that fails other than as `expectCode` throws. */
function spawnMs(n: number, args: string[], expectCode = 0): number[] {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    const r = spawnSync(process.execPath, args, { encoding: 'utf8' });
    out.push(performance.now() - t);
    if (r.status !== expectCode)
      throw new Error(`node ${args.join(' ')} exited ${r.status}, not ${expectCode}: ${r.stderr}`);
  }
  return out;
}

async function spawnTrueMs(n: number): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await new Promise((r) => spawn('true').on('exit', r));
    out.push(performance.now() - t);
  }
  return out;
}

const f = (ms: number) => Math.round(ms * 10) / 10;

/** A row of the table: p50 and p99 of `ms`, and the p50 as a multiple of a yardstick's p50. */
const timesRow = (measure: string, ms: number[], yardstickP50: number, yardstick: 'node' | 'spawn') => ({
  measure,
  p50_ms: f(percentile(ms, 50)),
  p99_ms: f(percentile(ms, 99)),
  ratio: `${(percentile(ms, 50) / yardstickP50).toFixed(1)}x ${yardstick}`,
});

describe('startup and hello latency', () => {
  it('measures', async () => {
    const node = nodeStartupMs(10);
    const spawnTrue = await spawnTrueMs(50);
    const nodeP50 = percentile(node, 50);
    const spawnP50 = percentile(spawnTrue, 50);

    // Cold and warm start of the quick start configuration.
    const cold: number[] = [];
    const warm: number[] = [];
    for (let i = 0; i < 3; i++) {
      const stateDir = await mkdtemp(path.join(os.tmpdir(), 'leoflow-bench-'));
      const args = [
        '--edition',
        'lite',
        '--dags',
        'examples',
        '--state-dir',
        stateDir,
        '--embedded-pg-port',
        String(await freePort()),
      ];
      try {
        for (const bucket of [cold, warm]) {
          const t = performance.now();
          const s = await startServer({ args, env: { DATABASE_URL: undefined }, readyTimeoutMs: 60_000 });
          bucket.push(performance.now() - t);
          expect((await s.stop()).code).toBe(0);
        }
      } finally {
        await rm(stateDir, { recursive: true, force: true });
      }
    }

    // Hello: trigger → success, measured by the server's own clock (created_at → ended_at), and
    // trigger → first task started.
    const db = await createTestDatabase();
    const s = await startServer({ env: { DATABASE_URL: db.url }, args: ['--dags', 'examples'] });
    const api = createClients(s.url);
    const total: number[] = [];
    const firstStart: number[] = [];
    try {
      for (let i = 0; i < 30; i++) {
        const { run } = await api.workflow.triggerRun({ dagId: 'hello' });
        for (;;) {
          const [r] = await db.sql<{ state: string; total: number; first: number }[]>`
            select r.state, extract(epoch from r.ended_at - r.created_at) * 1000 as total,
                   extract(epoch from (select min(started_at) from task_instances where run_id = r.id) - r.created_at) * 1000 as first
            from dag_runs r where r.id = ${run!.runId}`;
          if (r!.state === 'success') {
            total.push(Number(r!.total));
            firstStart.push(Number(r!.first));
            break;
          }
          if (r!.state !== 'running' && r!.state !== 'queued') throw new Error(`hello ended ${r!.state}`);
          await new Promise((res) => setTimeout(res, 5));
        }
      }
      // The README's command, end to end: CLI start-up, trigger, polling, exit.
      const cliRuns: number[] = [];
      for (let i = 0; i < 5; i++) {
        const t = performance.now();
        const r = await cli(s.url, ['run', 'trigger', 'hello', '--wait']);
        expect(r.code).toBe(0);
        cliRuns.push(performance.now() - t);
      }

      // The CLI's start, in turn with the yardstick so that both see the machine alike.
      const cliStart: Record<'help' | 'noServer' | 'dagList' | 'node', number[]> = {
        help: [],
        noServer: [],
        dagList: [],
        node: [],
      };
      for (let i = 0; i < 10; i++) {
        cliStart.node.push(...nodeStartupMs(1));
        cliStart.help.push(...spawnMs(1, [BIN, '--help']));
        cliStart.noServer.push(...spawnMs(1, [BIN, '--server', 'http://127.0.0.1:1', 'run', 'list'], 1));
        cliStart.dagList.push(...spawnMs(1, [BIN, '--server', s.url, 'dag', 'list']));
      }
      const cliNodeP50 = percentile(cliStart.node, 50);
      const cliRow = (measure: string, ms: number[]) => timesRow(measure, ms, cliNodeP50, 'node');

      const rows = [
        { measure: 'node -e 0 (yardstick)', p50_ms: f(nodeP50), p99_ms: f(percentile(node, 99)), ratio: '1.0x node' },
        {
          measure: "spawn('true') until exit (yardstick)",
          p50_ms: f(spawnP50),
          p99_ms: f(percentile(spawnTrue, 99)),
          ratio: '1.0x spawn',
        },
        timesRow('server start to ready, cold (initdb)', cold, nodeP50, 'node'),
        timesRow('server start to ready, warm', warm, nodeP50, 'node'),
        timesRow('hello: trigger to first task started', firstStart, spawnP50, 'spawn'),
        timesRow('hello: trigger to run success (2 tasks)', total, spawnP50, 'spawn'),
        timesRow('leoflow run trigger hello --wait (CLI)', cliRuns, nodeP50, 'node'),
        cliRow('node -e 0 (yardstick, in turn with the CLI rows below)', cliStart.node),
        cliRow('leoflow --help (CLI start)', cliStart.help),
        cliRow('leoflow run list, no server (CLI start, fast error)', cliStart.noServer),
        cliRow('leoflow dag list (CLI start and one call)', cliStart.dagList),
      ];
      await report('startup', rows, {
        samples: {
          cold: cold.length,
          warm: warm.length,
          hello: total.length,
          cli: cliRuns.length,
          cliStart: cliStart.help.length,
        },
      });
      await reportRatios();
    } finally {
      await s.stop();
      await db.drop();
    }
  });
});
