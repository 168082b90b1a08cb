import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { SETTINGS } from '../../src/server/config/settings.js';
import { deployment, one, proDefaults, ROOT } from '../helpers/pro-manifests.js';

/** A Containerfile's instructions, stage by stage (continuation lines joined, comments dropped). */
function parseContainerfile(
  text: string,
): { from: string; name: string | null; steps: { op: string; args: string }[] }[] {
  const lines = text
    .replace(/\\\n/g, ' ')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && !l.startsWith('#'));
  const stages: { from: string; name: string | null; steps: { op: string; args: string }[] }[] = [];
  for (const line of lines) {
    const [, op, args] = /^(\w+)\s+(.*)$/.exec(line)!;
    if (op!.toUpperCase() === 'FROM') {
      const m = /^(\S+)(?:\s+AS\s+(\S+))?$/i.exec(args!)!;
      stages.push({ from: m[1]!, name: m[2] ?? null, steps: [] });
    } else stages.at(-1)!.steps.push({ op: op!.toUpperCase(), args: args! });
  }
  return stages;
}

describe('Pro Containerfile', () => {
  const stages = parseContainerfile(readFileSync(path.join(ROOT, 'editions/pro/Containerfile'), 'utf8'));
  const runtime = stages.at(-1)!;
  const pkg = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {
    bin: Record<string, string>;
    dependencies: Record<string, string>;
  };

  it('builds in stages on a slim base of a Node LTS line still maintained six months from now', () => {
    // End of life of each Node LTS line, from the Node.js release schedule (github.com/nodejs/Release).
    // Meant to fail six months before the line's end, so the image moves to the next one in time.
    const endOfLife: Record<string, string> = {
      '20': '2026-04-30',
      '22': '2027-04-30',
      '24': '2028-04-30',
    };
    expect(stages.length).toBeGreaterThanOrEqual(2);
    const sixMonthsFromNow = Date.now() + 183 * 86_400_000;
    for (const s of stages) {
      const major = /(?:^|\/)node:(\d+)(?:\.\d+)*-(?:\w+-)?slim$/.exec(s.from)?.[1];
      expect(major, s.from).toBeDefined();
      expect(endOfLife[major!], `node ${major} is an LTS line`).toBeDefined();
      expect(Date.parse(endOfLife[major!]!), `node ${major} maintained six months from now`).toBeGreaterThan(
        sixMonthsFromNow,
      );
    }
  });

  it('copies only paths that exist in the repository, and from stages that exist', () => {
    const names = new Set(stages.map((s) => s.name).filter(Boolean));
    for (const s of stages) {
      for (const step of s.steps.filter((x) => x.op === 'COPY')) {
        const parts = step.args.split(/\s+/);
        const from = parts.find((p) => p.startsWith('--from='));
        const paths = parts.filter((p) => !p.startsWith('--'));
        const sources = paths.slice(0, -1);
        expect(sources.length, step.args).toBeGreaterThan(0);
        if (from) expect(names.has(from.slice('--from='.length)), step.args).toBe(true);
        else for (const src of sources) expect(existsSync(path.join(ROOT, src)), `COPY ${src}`).toBe(true);
      }
    }
  });

  it('brings into the runtime stage everything the server reads at run time', () => {
    const copied = runtime.steps
      .filter((x) => x.op === 'COPY')
      .map((x) =>
        x.args
          .split(/\s+/)
          .filter((p) => !p.startsWith('--'))
          .at(-1)!
          .replace(/^\.\//, '')
          .replace(/\/$/, ''),
      );
    const tsconfig = JSON.parse(readFileSync(path.join(ROOT, 'tsconfig.build.json'), 'utf8')) as {
      compilerOptions: { outDir: string };
    };
    // The compiled code, the command, the edition defaults, the migrations migrate.ts reads, the
    // dependencies, and the vendored driver that node_modules links to.
    for (const need of [
      tsconfig.compilerOptions.outDir,
      'bin',
      'editions',
      'src/db/migrations',
      'node_modules',
      'package.json',
    ])
      expect(copied).toContain(need);
    expect(pkg.dependencies.postgres).toBe('file:vendor/postgres');
    expect(copied).toContain('vendor');
  });

  it('runs the package bin as a non-root numeric user, with `server` and flags the server accepts', () => {
    const workdir = runtime.steps.filter((x) => x.op === 'WORKDIR').at(-1)!.args;
    const user = runtime.steps.filter((x) => x.op === 'USER').at(-1)!.args;
    const [uid, gid] = user.split(':').map(Number);
    expect(uid).toBeGreaterThan(0);
    expect(gid).toBeGreaterThan(0);
    expect(uid).toBe(deployment.spec.template.spec.securityContext.runAsUser);
    const entrypoint = JSON.parse(runtime.steps.find((x) => x.op === 'ENTRYPOINT')!.args) as string[];
    expect(entrypoint).toEqual(['node', path.posix.join(workdir, pkg.bin.leoflow!)]);
    expect(existsSync(path.join(ROOT, pkg.bin.leoflow!))).toBe(true);
    const cmd = JSON.parse(runtime.steps.find((x) => x.op === 'CMD')!.args) as string[];
    expect(cmd[0]).toBe('server');
    const flags = new Set<string>(Object.values(SETTINGS).map((s) => s.flag));
    for (let i = 1; i < cmd.length; i += 2) expect(flags.has(cmd[i]!), cmd[i]).toBe(true);
    // The state directory the Deployment mounts is the Pro default, owned by that user in the image.
    expect(runtime.steps.find((x) => x.op === 'RUN' && x.args.includes(proDefaults.state_dir!))?.args).toContain(
      `chown ${user} ${proDefaults.state_dir}`,
    );
  });
});
