#!/usr/bin/env node
// Installs the benchmark peers (bench/package.json) into bench/node_modules when they are missing
// or differ from bench/package-lock.json; `npm run bench` runs it first. They live in a package of
// their own so that Leoflow's `npm ci` neither downloads them nor warns about the Node version
// they ask for.
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const dir = path.dirname(fileURLToPath(import.meta.url));

function readPackages(file) {
  try {
    return JSON.parse(readFileSync(path.join(dir, file), 'utf8')).packages ?? {};
  } catch {
    return null;
  }
}

/** What the lock names and node_modules lacks (read from npm's record of the install, its hidden
 *  lockfile), or null when nothing is installed. */
function missingFromInstall() {
  const wanted = readPackages('package-lock.json');
  if (wanted === null) throw new Error('bench/package-lock.json is missing: run `npm install --prefix bench`');
  const installed = readPackages('node_modules/.package-lock.json');
  if (installed === null) return null;
  return Object.entries(wanted)
    .filter(([key, p]) => key !== '' && !p.optional && installed[key]?.version !== p.version)
    .map(([key, p]) => `${key.replace(/^.*node_modules\//, '')}@${p.version}`);
}

const missing = missingFromInstall();
if (missing === null || missing.length > 0) {
  const why = missing === null ? 'not installed yet' : `changed: ${missing.length > 3 ? `${missing.length} packages` : missing.join(', ')}`;
  process.stdout.write(
    `bench: installing the peers into bench/node_modules (${why}); npm's EBADENGINE warnings below are` +
      ' expected (a peer that asks for a newer Node runs on this one)\n',
  );
  const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
  const r = spawnSync(npm, ['ci', '--prefix', dir, '--no-audit', '--no-fund'], { stdio: 'inherit' });
  if (r.status !== 0) {
    process.stderr.write(`bench: \`npm ci --prefix bench\` failed (${r.error?.message ?? `exit ${r.status}`})\n`);
    process.exit(1);
  }
}
