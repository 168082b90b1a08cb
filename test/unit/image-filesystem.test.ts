import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import { parseAllDocuments } from 'yaml';
import { loadConfig } from '../../src/server/config/load-config.js';
import { containerfileImage, resolveInImage, type ImageFilesystem } from '../helpers/fake-kube/image-filesystem.js';

const tmp = mkdtempSync(join(tmpdir(), 'leoflow-image-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

function script(name: string, text: string, mode = 0o755): string {
  const p = join(tmp, name);
  writeFileSync(p, text);
  chmodSync(p, mode);
  return p;
}

describe('the fake kubelet resolves a command inside the image', () => {
  const tool = script('tool', '#!/usr/bin/env node\n');
  const plain = script('plain', 'not a script', 0o644);
  const fs: ImageFilesystem = {
    path: '/usr/local/bin:/usr/bin',
    workdir: '/app',
    files: {
      '/usr/local/bin/node': process.execPath,
      '/usr/bin/env': '/usr/bin/env',
      '/app/bin/tool.js': tool,
      '/app/bin/plain': plain,
      '/usr/local/bin/tool': { link: '/app/bin/tool.js' },
      '/usr/local/bin/rel': { link: '../../../app/bin/tool.js' },
      '/lib': { link: 'app' },
    },
  };

  it('looks the command up on the image PATH, never the host PATH', () => {
    // `sh` is on the host's PATH, not in this image.
    expect(resolveInImage(fs, ['sh', '-c', 'true'], undefined)).toEqual({
      error: 'exec: "sh": executable file not found in $PATH',
    });
    expect(resolveInImage(fs, ['leoflow'], undefined)).toEqual({
      error: 'exec: "leoflow": executable file not found in $PATH',
    });
  });

  it('follows symlinks (absolute, relative, in a directory component) and a #! line through env', () => {
    for (const cmd of ['tool', 'rel', '/lib/bin/tool.js', 'bin/tool.js']) {
      expect(resolveInImage(fs, [cmd, 'agent'], undefined), cmd).toEqual({ argv: [process.execPath, tool, 'agent'] });
    }
  });

  it('uses the container PATH when it sets one, and refuses a file without the exec bit', () => {
    expect(resolveInImage(fs, ['tool'], '/nowhere')).toEqual({
      error: 'exec: "tool": executable file not found in $PATH',
    });
    expect(resolveInImage(fs, ['/app/bin/plain'], undefined)).toEqual({
      error: 'exec: "/app/bin/plain": stat /app/bin/plain: no such file or directory',
    });
  });

  it('finds no `node` where the node image has none (only /usr/local/bin)', () => {
    const image = containerfileImage();
    expect(resolveInImage(image, ['/usr/bin/node'], undefined)).toHaveProperty('error');
    expect(resolveInImage(image, ['node', '-v'], undefined)).toEqual({ argv: [process.execPath, '-v'] });
  });
});

describe('the shipped image (editions/pro/Containerfile)', () => {
  it('has on its PATH the pod agent command the shipped manifests configure', () => {
    // The environment `leoflow server` gets from the shipped ConfigMap and Deployment (plain values).
    const env: Record<string, string> = {};
    for (const file of ['configmap.yaml', 'deployment.yaml']) {
      for (const doc of parseAllDocuments(readFileSync(join('editions/pro/kubernetes', file), 'utf8'))) {
        const o = doc.toJS();
        if (o?.kind === 'ConfigMap') Object.assign(env, o.data);
        for (const c of o?.spec?.template?.spec?.containers ?? [])
          for (const e of c.env ?? []) if (typeof e.value === 'string') env[e.name] = e.value;
      }
    }
    env.LEOFLOW_EXECUTOR ??= 'kubernetes';
    env.DATABASE_URL = 'postgres://db/leoflow'; // from the leoflow-database Secret
    env.LEOFLOW_POD_SERVER_URL ??= 'http://leoflow.leoflow.svc:7070';
    const { agentCommand } = loadConfig({}, env, '/srv').kubernetes!;
    const resolved = resolveInImage(containerfileImage(), [...agentCommand, 'agent', '--once'], undefined);
    expect(resolved).toEqual({ argv: [process.execPath, join(process.cwd(), 'bin/leoflow.js'), 'agent', '--once'] });
  });
});
