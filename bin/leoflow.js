#!/usr/bin/env node
// The `leoflow` command. The TypeScript sources are compiled to dist/ by `npm ci` (the prepare
// script) or `npm run build`; this file only checks that the build is there and current.
import { existsSync, statSync } from 'node:fs';
import { readdir, stat } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const root = fileURLToPath(new URL('..', import.meta.url));
const entry = path.join(root, 'dist/cli/main.js');
if (!existsSync(entry)) {
  process.stderr.write('leoflow: dist/ is missing; run `npm run build` first\n');
  process.exit(1);
}

/** The dashboard's sources: built by Vite into dist/ui, not by tsc into what this command runs. */
const UI_SOURCES = path.join(root, 'src/ui');

/** The newest mtime of the TypeScript files under `dir` (only they need a build). */
async function newestMtime(dir) {
  const entries = await readdir(dir, { withFileTypes: true });
  const times = await Promise.all(
    entries.map((e) => {
      const p = path.join(dir, e.name);
      if (e.isDirectory()) return p === UI_SOURCES ? 0 : newestMtime(p);
      return e.name.endsWith('.ts') ? stat(p).then((s) => s.mtimeMs) : 0;
    }),
  );
  return Math.max(0, ...times);
}

// A source tree edited after the last build would run stale code: say so. Asynchronous, so that
// the stats run on libuv's threads while the command's modules load, not before them.
const src = path.join(root, 'src');
const built = path.join(root, 'dist/.tsbuildinfo');
if (existsSync(src) && existsSync(built)) {
  newestMtime(src).then(
    (newest) => {
      if (newest > statSync(entry).mtimeMs + 1000 && newest > statSync(built).mtimeMs) {
        process.stderr.write('leoflow: warning: src/ changed since the last build; run `npm run build`\n');
      }
    },
    () => {},
  );
}
await import(entry);
