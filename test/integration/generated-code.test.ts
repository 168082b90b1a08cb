import { execFile } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/leoflow-process.js';

const run = promisify(execFile);

async function tree(dir: string, base = dir): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) for (const [k, v] of await tree(p, base)) out.set(k, v);
    else out.set(path.relative(base, p), await readFile(p, 'utf8'));
  }
  return out;
}

/** src/gen is committed; this fails when someone edits a .proto and forgets `npm run generate`. */
describe('generated code', () => {
  it('src/gen is what buf generates from proto/ today', async () => {
    const out = await mkdtemp(path.join(os.tmpdir(), 'leoflow-gen-'));
    try {
      await run(path.join(ROOT, 'node_modules/.bin/buf'), ['generate', '--template', 'buf.gen.yaml', '-o', out], {
        cwd: ROOT,
      });
      const fresh = await tree(path.join(out, 'src/gen'));
      const committed = await tree(path.join(ROOT, 'src/gen'));
      expect([...committed.keys()].sort()).toEqual([...fresh.keys()].sort());
      for (const [file, text] of fresh)
        expect(committed.get(file), `src/gen/${file} is out of date: run npm run generate`).toBe(text);
    } finally {
      await rm(out, { recursive: true, force: true });
    }
  }, 60_000);

  it('examples/python/gen is what buf generates from proto/ today', async () => {
    const out = await mkdtemp(path.join(os.tmpdir(), 'leoflow-gen-py-'));
    try {
      await run(
        path.join(ROOT, 'node_modules/.bin/buf'),
        ['generate', '--template', 'buf.gen.python.yaml', '-o', out],
        { cwd: ROOT },
      );
      const fresh = await tree(path.join(out, 'examples/python/gen'));
      const committed = await tree(path.join(ROOT, 'examples/python/gen'));
      expect([...committed.keys()].sort()).toEqual([...fresh.keys()].sort());
      for (const [file, text] of fresh)
        expect(committed.get(file), `examples/python/gen/${file} is out of date: run npm run generate`).toBe(text);
    } finally {
      await rm(out, { recursive: true, force: true });
    }
  }, 60_000);
});
