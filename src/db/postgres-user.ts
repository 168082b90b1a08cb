import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** The uid and gid the embedded Postgres runs as; empty when it runs as the current user. */
export interface Ids {
  uid?: number;
  gid?: number;
}

/** Postgres refuses to run as root; as root we run it as the `postgres` user (created if absent). */
export async function postgresIds(): Promise<Ids> {
  if (process.getuid?.() !== 0) return {};
  const lookup = async () => {
    const uid = Number((await run('id', ['-u', 'postgres'])).stdout.trim());
    const gid = Number((await run('id', ['-g', 'postgres'])).stdout.trim());
    return { uid, gid };
  };
  try {
    return await lookup();
  } catch {
    await run('groupadd', ['-f', 'postgres']);
    await run('useradd', ['-g', 'postgres', '-M', '-s', '/usr/sbin/nologin', 'postgres']);
    return lookup();
  }
}

/**
 * Whether `ids` passes every `test(1)` expression given, e.g. `['-x', dir]`. Asked of the kernel
 * as that user, so every folder on the way (a mode-700 home, an ACL) counts, as it will for
 * initdb and postgres.
 */
export async function userCan(ids: Ids, ...checks: [flag: string, file: string][]): Promise<boolean> {
  const args = checks.flatMap(([flag, file], i) => (i === 0 ? [flag, file] : ['-a', flag, file]));
  try {
    await run('test', args, { uid: ids.uid, gid: ids.gid });
    return true;
  } catch {
    return false;
  }
}
