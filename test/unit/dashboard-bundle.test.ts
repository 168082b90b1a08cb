import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { gzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { DASHBOARD_DIR } from '../../src/server/dashboard/dashboard-files.js';

/** The dashboard's JavaScript, gzipped, stays under this (docs/guide.md, "Dashboard"). */
const BUDGET_BYTES = 250 * 1024;

describe('the dashboard bundle', () => {
  it(`is under ${BUDGET_BYTES / 1024} KiB of gzipped JavaScript (npm run build makes it)`, () => {
    const assets = path.join(DASHBOARD_DIR, 'assets');
    const js = readdirSync(assets).filter((f) => f.endsWith('.js'));
    expect(js.length).toBeGreaterThan(0);
    const gzipped = js.reduce((n, f) => n + gzipSync(readFileSync(path.join(assets, f)), { level: 9 }).length, 0);
    expect(gzipped).toBeLessThan(BUDGET_BYTES);
  });
});
