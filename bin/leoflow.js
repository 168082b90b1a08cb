#!/usr/bin/env node
// The `leoflow` command. The TypeScript sources are compiled to dist/ by `npm ci` (prepare) or
// `npm run build`.
import { existsSync } from 'node:fs';

if (!existsSync(new URL('../dist/cli/main.js', import.meta.url))) {
  process.stderr.write('leoflow: dist/ is missing; run `npm run build` first\n');
  process.exit(1);
}
await import('../dist/cli/main.js');
