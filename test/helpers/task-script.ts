import { writeFile } from 'node:fs/promises';
import path from 'node:path';

/** Writes an executable `sh` script (`set -e`, then `body`) as `dir/name`, a task's command; resolves with its path. */
export async function writeTaskScript(dir: string, name: string, body: string): Promise<string> {
  const file = path.join(dir, name);
  await writeFile(file, `#!/bin/sh\nset -e\n${body}\n`, { mode: 0o755 });
  return file;
}
