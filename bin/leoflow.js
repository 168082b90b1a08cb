#!/usr/bin/env node
// The `leoflow` command. The TypeScript sources are compiled to dist/ by `npm ci` (the prepare
// script) or `npm run build`; this file only checks that the build is there and current.
import { existsSync, readdirSync, statSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const root = fileURLToPath(new URL('..', import.meta.url));
const entry = path.join(root, 'dist/cli/main.js');
if (!existsSync(entry)) {
  process.stderr.write('leoflow: dist/ is missing; run `npm run build` first\n');
  process.exit(1);
}

/** A source tree edited after the last build would run stale code: say so (cheap: mtimes only). */
function newestMtime(dir) {
  let newest = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    newest = Math.max(newest, e.isDirectory() ? newestMtime(p) : statSync(p).mtimeMs);
  }
  return newest;
}
if (existsSync(path.join(root, 'src')) && newestMtime(path.join(root, 'src')) > statSync(entry).mtimeMs + 1000) {
  const built = path.join(root, 'dist/.tsbuildinfo');
  if (existsSync(built) && newestMtime(path.join(root, 'src')) > statSync(built).mtimeMs) {
    process.stderr.write('leoflow: warning: src/ changed since the last build; run `npm run build`\n');
  }
}
await import(entry);
