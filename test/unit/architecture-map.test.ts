import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = path.resolve(import.meta.dirname, '../..');
const MAP = readFileSync(path.join(ROOT, 'docs/architecture.md'), 'utf8');

/** Every `path` the map names in backticks under one of the project's folders. */
function namedPaths(): string[] {
  const found = [
    ...MAP.matchAll(/`((?:src|test|docs|bench|editions|examples|proto|deploy|kubernetes)\/[^`\s]*)`/g),
  ].map((m) => m[1]!);
  return [...new Set(found)];
}

/** A path, or a glob whose `*` stands within one name (`src/db/migrations/*.sql`), that matches something. */
function exists(p: string): boolean {
  if (!p.includes('*')) return existsSync(path.join(ROOT, p));
  const parts = p.split('/');
  let dirs = [ROOT];
  for (const part of parts) {
    const re = new RegExp(`^${part.replace(/[.+?^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '[^/]*')}$`);
    dirs = dirs.flatMap((d) => {
      if (!part.includes('*')) return existsSync(path.join(d, part)) ? [path.join(d, part)] : [];
      try {
        return readdirSync(d)
          .filter((n) => re.test(n))
          .map((n) => path.join(d, n));
      } catch {
        return [];
      }
    });
  }
  return dirs.length > 0;
}

describe('docs/architecture.md', () => {
  it('names only files that exist', () => {
    const named = namedPaths();
    expect(named.length).toBeGreaterThan(50);
    expect(named.filter((p) => !exists(p))).toEqual([]);
  });

  it('names each concept once: no row of its tables is repeated', () => {
    const rows = MAP.split('\n').filter(
      (l) => l.startsWith('| ') && !l.startsWith('| concept') && !l.startsWith('|---'),
    );
    const seen = new Set<string>();
    const twice = rows.filter((r) => (seen.has(r) ? true : (seen.add(r), false)));
    expect(twice).toEqual([]);
  });
});
