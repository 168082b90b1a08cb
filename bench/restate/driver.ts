import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import * as restate from '@restatedev/restate-sdk';
import {
  CHAIN,
  type DurablePeerResult,
  type InFlightResult,
  inFlight,
  medianChain,
  spawnTrue,
  startLatency,
  stepStats,
} from '../durable-peer.js';

/**
 * Measures Restate from inside a network namespace of its own (restate-peer.ts starts it there):
 * starts `restate-server` with its log in BASE_DIR, serves the Bench service from this process,
 * registers it, measures, and prints one line `RESULT <json>`. The ports are Restate's defaults,
 * free in a namespace that holds nothing else.
 *
 * Usage: node driver.js BASE_DIR RESTATE_SERVER_BIN WORKFLOWS CONCURRENCY[,CONCURRENCY...]
 */

const RESTATE_VERSION = 'Restate 1.7.12 (@restatedev/restate-sdk 1.12.0)';
const INGRESS = 'http://127.0.0.1:8080';
const ADMIN = 'http://127.0.0.1:9070';
const ENDPOINT_PORT = 9080;
const READY_WITHIN_MS = 60_000;

const [baseDir, serverBin, workflowsArg, concurrencyArg] = process.argv.slice(2);
if (!baseDir || !serverBin || !workflowsArg || !concurrencyArg) {
  process.stderr.write('usage: driver.js BASE_DIR RESTATE_SERVER_BIN WORKFLOWS CONCURRENCY[,CONCURRENCY...]\n');
  process.exit(2);
}

let chainStarts: number[] = [];
let onStep: (() => void) | null = null;

const bench = restate.service({
  name: 'Bench',
  handlers: {
    chain: async (ctx: restate.Context, spawnEach: boolean): Promise<void> => {
      for (let i = 0; i < CHAIN; i++) {
        await ctx.run(`step-${i}`, async () => {
          chainStarts.push(performance.now());
          if (spawnEach) await spawnTrue();
        });
      }
    },
    one: async (ctx: restate.Context): Promise<void> => {
      await ctx.run('only', async () => onStep?.());
    },
  },
});

async function call(handler: string, body: unknown): Promise<void> {
  const r = await fetch(`${INGRESS}/Bench/${handler}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  if (!r.ok) throw new Error(`POST /Bench/${handler}: ${r.status} ${await r.text()}`);
  await r.arrayBuffer();
}

async function until(what: string, check: () => Promise<boolean>): Promise<void> {
  const deadline = performance.now() + READY_WITHIN_MS;
  for (;;) {
    if (await check().catch(() => false)) return;
    if (performance.now() > deadline) throw new Error(`${what} not within ${READY_WITHIN_MS} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

function startServer(): ChildProcess {
  const log = createWriteStream(path.join(baseDir!, 'restate-server.log'));
  const env = {
    ...process.env,
    RESTATE_DISABLE_TELEMETRY: 'true',
    RESTATE_LISTEN_MODE: 'tcp',
    RESTATE_LOG_FILTER: 'warn',
    RESTATE_LOG_DISABLE_ANSI_CODES: 'true',
  };
  const server = spawn(serverBin!, ['--no-logo', '--base-dir', path.join(baseDir!, 'data'), '--node-name', 'bench'], {
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  server.stdout!.pipe(log);
  server.stderr!.pipe(log);
  return server;
}

async function stopServer(server: ChildProcess): Promise<void> {
  if (server.exitCode !== null || server.signalCode !== null) return;
  const exited = new Promise((r) => server.once('exit', r));
  server.kill('SIGTERM');
  const t = setTimeout(() => server.kill('SIGKILL'), 15_000);
  await exited;
  clearTimeout(t);
}

async function measure(workflows: number, concurrency: number[]): Promise<DurablePeerResult> {
  const runChain = (spawnEach: boolean) => async () => {
    chainStarts = [];
    await call('chain', spawnEach);
    return stepStats(chainStarts);
  };
  const chain = await medianChain(runChain(false));
  const spawnChain = await medianChain(runChain(true));
  const throughput: InFlightResult[] = [];
  for (const c of concurrency) {
    const { done, windowMs } = await inFlight(workflows, c, () => call('one', null));
    throughput.push({
      concurrency: c,
      workflows,
      done,
      perSec: done / (windowMs / 1000),
      xactPerWorkflow: null,
      windowMs,
    });
  }
  const latency = await startLatency(async (entered) => {
    onStep = entered;
    await call('one', null);
  });
  return {
    peer: RESTATE_VERSION,
    config:
      'single node, default settings, its own log (RocksDB) in a temporary folder; the service in the calling process over HTTP/2; ingress calls over HTTP/1.1',
    chain,
    spawnChain,
    throughput,
    latency,
  };
}

const server = startServer();
let code = 0;
try {
  await restate.serve({ services: [bench], port: ENDPOINT_PORT });
  await until('restate-server ready', async () => (await fetch(`${INGRESS}/restate/health`)).ok);
  await until('the Bench deployment registered', async () => {
    const r = await fetch(`${ADMIN}/deployments`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ uri: `http://127.0.0.1:${ENDPOINT_PORT}` }),
    });
    return r.ok;
  });
  const result = await measure(Number(workflowsArg), concurrencyArg.split(',').map(Number));
  process.stdout.write(`RESULT ${JSON.stringify(result)}\n`);
} catch (e) {
  const log = await readFile(path.join(baseDir, 'restate-server.log'), 'utf8').catch(() => '');
  process.stderr.write(
    `${e instanceof Error ? e.stack : String(e)}\nrestate-server's log (last 40 lines):\n${log.split('\n').slice(-40).join('\n')}\n`,
  );
  code = 1;
} finally {
  await stopServer(server);
}
process.exit(code);
