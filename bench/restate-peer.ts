import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { DurablePeerResult } from './durable-peer.js';

/**
 * Restate, measured by bench/restate/driver.ts in a network namespace that holds only a loopback
 * interface. restate-server asks GitHub for its latest release at every start, unconditionally
 * (server/src/build_info.rs); in the namespace that request cannot leave the machine, and the
 * benchmark stays on loopback like every other. Needs Linux, `unshare` and `ip` (util-linux and
 * iproute2); as a user other than root, unprivileged user namespaces.
 */

const BENCH = path.dirname(fileURLToPath(import.meta.url));
const DRIVER = path.join(BENCH, '.build/restate/driver.js');
const SERVER = path.join(BENCH, 'node_modules/@restatedev/restate-server-linux-x64/bin/restate-server');
const LIMIT_MS = 15 * 60_000;

export async function restate(workflows: number, concurrency: number[]): Promise<DurablePeerResult> {
  if (!existsSync(SERVER))
    throw new Error(`${SERVER} is missing: the Restate peer runs on Linux x64 only (bench/package.json)`);
  if (!existsSync(DRIVER))
    throw new Error(`${DRIVER} is missing: \`npm run bench\` compiles it (tsc -p bench/restate)`);
  const base = await mkdtemp(path.join(os.tmpdir(), 'leoflow-bench-restate-'));
  const userns = process.getuid?.() === 0 ? [] : ['--map-root-user'];
  // Its own process group, so a driver that overruns is ended with its restate-server.
  const child = spawn(
    'unshare',
    [
      ...userns,
      '--net',
      '--',
      'sh',
      '-c',
      'ip link set lo up && exec "$@"',
      'sh',
      process.execPath,
      DRIVER,
      base,
      SERVER,
      String(workflows),
      concurrency.join(','),
    ],
    {
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    },
  );
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (d: Buffer) => (stdout += d));
  child.stderr!.on('data', (d: Buffer) => (stderr += d));
  const timer = setTimeout(() => process.kill(-child.pid!, 'SIGKILL'), LIMIT_MS);
  try {
    const code = await new Promise<number | null>((resolve, reject) =>
      child.on('error', reject).on('exit', (c) => resolve(c)),
    );
    const line = stdout.split('\n').find((l) => l.startsWith('RESULT '));
    if (code !== 0 || !line)
      throw new Error(
        `the Restate driver exited ${code ?? 'by a signal'} (limit ${LIMIT_MS / 60_000} min):\n${stderr}${stdout}`,
      );
    return JSON.parse(line.slice('RESULT '.length)) as DurablePeerResult;
  } finally {
    clearTimeout(timer);
    await rm(base, { recursive: true, force: true });
  }
}
