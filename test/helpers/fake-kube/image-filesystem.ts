import {
  accessSync,
  constants,
  existsSync,
  lstatSync,
  openSync,
  readFileSync,
  readSync,
  closeSync,
  readdirSync,
  statSync,
} from 'node:fs';
import { dirname, join, posix, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The executables of an image, so the fake kubelet resolves a container's command as the runtime
 * does (runc's exec.LookPath over the container's PATH, inside the image), not with the host's
 * PATH. Each executable path of the image is played by a host file, or is a symlink to another
 * path of the image. A script's `#!` line is followed inside the image too (the kernel's binfmt),
 * so `#!/usr/bin/env node` needs `/usr/bin/env` and a `node` on the image's PATH.
 */
export interface ImageFilesystem {
  /** The image's `ENV PATH` (the container's PATH unless its env sets one). */
  path: string;
  /** The image's WORKDIR, against which a relative command with a `/` resolves. */
  workdir: string;
  /** Executable image paths: the host file that plays it, or a symlink (`{ link }`, absolute or relative). */
  files: Record<string, string | { link: string }>;
}

/** The host argv to spawn for a container's command, or the runtime's error detail. */
export function resolveInImage(
  fs: ImageFilesystem,
  argv: string[],
  pathEnv: string | undefined,
  workingDir?: string,
): { argv: string[] } | { error: string } {
  const command = argv[0]!;
  let imagePath: string | undefined;
  if (command.includes('/')) {
    imagePath = posix.resolve(workingDir || fs.workdir, command);
    if (follow(fs, imagePath) === undefined)
      return { error: `exec: "${command}": stat ${command}: no such file or directory` };
  } else {
    for (const dir of (pathEnv ?? fs.path).split(':')) {
      const candidate = posix.join(dir || '.', command);
      if (follow(fs, candidate) !== undefined) {
        imagePath = candidate;
        break;
      }
    }
    if (imagePath === undefined) return { error: `exec: "${command}": executable file not found in $PATH` };
  }
  const host = follow(fs, imagePath)!;
  const shebang = interpreterLine(host);
  if (shebang === undefined) return { argv: [host, ...argv.slice(1)] };
  // `#!interpreter [arg]`: the interpreter is an image path, run with the script as an argument.
  const [interp, ...interpArgs] = shebang;
  const inner = resolveInImage(fs, [interp!, ...interpArgs, host, ...argv.slice(1)], pathEnv, workingDir);
  if ('error' in inner) return { error: `exec: "${command}": interpreter ${interp}: no such file or directory` };
  // `env` finds its program on the PATH: inside the image as well.
  if (posix.basename(interp!) === 'env' && interpArgs.length > 0) {
    const prog = resolveInImage(fs, [interpArgs[0]!, host, ...argv.slice(1)], pathEnv, workingDir);
    if ('error' in prog) return { error: `/usr/bin/env: '${interpArgs[0]}': No such file or directory` };
    return prog;
  }
  return inner;
}

/**
 * The host file behind an image path, following symlinks in every component (at most 40, as Linux
 * does). Directories have no entries of their own: only files and links do.
 */
function follow(fs: ImageFilesystem, path: string): string | undefined {
  let parts = path.split('/').filter(Boolean);
  let done = '/';
  let hops = 0;
  while (parts.length > 0) {
    const p = posix.join(done, parts[0]!);
    const f = fs.files[p];
    if (f !== undefined && typeof f !== 'string') {
      if (++hops > 40) return undefined;
      parts = [...posix.resolve(done, f.link).split('/').filter(Boolean), ...parts.slice(1)];
      done = '/';
      continue;
    }
    if (parts.length === 1) return typeof f === 'string' && isExecutable(f) ? f : undefined;
    if (f !== undefined) return undefined; // a file used as a directory
    done = p;
    parts = parts.slice(1);
  }
  return undefined;
}

function isExecutable(host: string): boolean {
  try {
    accessSync(host, constants.X_OK);
    return statSync(host).isFile();
  } catch {
    return false;
  }
}

function interpreterLine(host: string): string[] | undefined {
  const buf = Buffer.alloc(256);
  const fd = openSync(host, 'r');
  let n: number;
  try {
    n = readSync(fd, buf, 0, buf.length, 0);
  } finally {
    closeSync(fd);
  }
  const head = buf.subarray(0, n).toString('latin1');
  if (!head.startsWith('#!')) return undefined;
  const line = head.slice(2).split('\n')[0]!.trim();
  // Linux passes everything after the interpreter as ONE argument.
  const space = line.search(/\s/);
  return space < 0 ? [line] : [line.slice(0, space), line.slice(space).trim()];
}

/** Programs of debian:bookworm-slim (dash, bash, coreutils, procps-less) a container command may name. */
const DEBIAN_SLIM = [
  'sh',
  'dash',
  'bash',
  'env',
  'true',
  'false',
  'sleep',
  'cat',
  'echo',
  'ls',
  'kill',
  'printf',
  'test',
  'mkdir',
  'rm',
  'cp',
  'mv',
  'head',
  'tail',
  'tee',
  'date',
  'id',
];

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');

/** The PATH the official node images set (docker-library/node: no ENV PATH of their own, Debian's default). */
const NODE_IMAGE_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/**
 * The runtime stage of a Containerfile as an image filesystem: a `node:*` base (node in
 * /usr/local/bin, Debian's sh and env), then each instruction that puts executables in the image:
 * `WORKDIR`, `ENV PATH=…`, `COPY <context path> <dest>` (files keep their mode, as COPY does) and
 * `RUN … ln -s <target> <link> …`. Other stages and `COPY --from` bring in no executable a command
 * could name, and are skipped.
 */
export function containerfileImage(
  containerfile = join(REPO, 'editions/pro/Containerfile'),
  context = REPO,
): ImageFilesystem {
  const lines = readFileSync(containerfile, 'utf8')
    .replace(/\\\n/g, ' ')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith('#'));
  const stages: string[][] = [];
  for (const l of lines) {
    if (/^FROM\s/i.test(l)) stages.push([]);
    stages.at(-1)?.push(l);
  }
  const last = stages.at(-1) ?? [];
  const from = last[0] ?? '';
  if (!/\bnode:[^\s]*\b/.test(from))
    throw new Error(`the fake models node base images only, got ${JSON.stringify(from)}`);
  const fs: ImageFilesystem = {
    path: NODE_IMAGE_PATH,
    workdir: '/',
    files: { '/usr/local/bin/node': process.execPath },
  };
  // Debian's merged /usr: each of these is in /usr/bin, and /bin is a link to it. No `node` there.
  fs.files['/bin'] = { link: 'usr/bin' };
  for (const name of DEBIAN_SLIM) {
    const host = [`/usr/bin/${name}`, `/bin/${name}`].find((h) => existsSync(h));
    if (host) fs.files[`/usr/bin/${name}`] = host;
  }
  for (const l of last.slice(1)) {
    const [op, ...rest] = l.split(/\s+/);
    const args = rest.filter((a) => !a.startsWith('--'));
    switch (op!.toUpperCase()) {
      case 'WORKDIR':
        fs.workdir = posix.resolve(fs.workdir, args[0]!);
        break;
      case 'ENV': {
        const m = /\bPATH[= ]"?([^"\s]+)"?/.exec(rest.join(' '));
        if (m) fs.path = m[1]!.replace(/\$\{?PATH\}?/, fs.path);
        break;
      }
      case 'COPY':
        if (rest.some((a) => a.startsWith('--from'))) break;
        copyExecutables(fs, join(context, args[0]!), posix.resolve(fs.workdir, args[1]!));
        break;
      case 'RUN':
        for (const m of rest.join(' ').matchAll(/\bln\s+-s[f]?\s+(\S+)\s+(\S+)/g))
          fs.files[posix.resolve(fs.workdir, m[2]!)] = { link: m[1]! };
        break;
      default:
        break;
    }
  }
  return fs;
}

function copyExecutables(fs: ImageFilesystem, host: string, dest: string): void {
  if (!existsSync(host)) return;
  if (!lstatSync(host).isDirectory()) {
    fs.files[dest.endsWith('/') ? posix.join(dest, posix.basename(host)) : dest] = host;
    return;
  }
  for (const e of readdirSync(host, { withFileTypes: true })) {
    if (e.name === 'node_modules') continue;
    const h = join(host, e.name);
    if (e.isDirectory()) copyExecutables(fs, h, posix.join(dest, e.name));
    else if (e.isFile() && isExecutable(h)) fs.files[posix.join(dest, e.name)] = h;
  }
}
