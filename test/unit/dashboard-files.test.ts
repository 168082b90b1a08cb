import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { gunzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dashboardFiles } from '../../src/server/dashboard/dashboard-files.js';
import { httpGet } from '../helpers/http-get.js';

/** The dashboard's file serving, on a folder made here: routes, types, caching, traversal, no build. */

const dir = mkdtempSync(path.join(os.tmpdir(), 'leoflow-ui-files-'));
const build = path.join(dir, 'ui');
mkdirSync(path.join(build, 'assets'), { recursive: true });
writeFileSync(path.join(build, 'index.html'), '<!doctype html><title>x</title>');
writeFileSync(path.join(build, 'assets', 'index-abc123.js'), 'console.log(1)');
writeFileSync(path.join(build, 'assets', 'index-abc123.css'), 'body{}');
writeFileSync(path.join(dir, 'secret.txt'), 'outside');

let built: http.Server;
let missing: http.Server;
const url = (s: http.Server) => `http://127.0.0.1:${(s.address() as AddressInfo).port}`;

beforeAll(async () => {
  built = http.createServer(dashboardFiles(build));
  missing = http.createServer(dashboardFiles(path.join(dir, 'nothing')));
  await Promise.all([built, missing].map((s) => new Promise<void>((r) => s.listen(0, '127.0.0.1', r))));
});

afterAll(async () => {
  await Promise.all([built, missing].map((s) => new Promise((r) => s.close(r))));
  rmSync(dir, { recursive: true, force: true });
});

describe('dashboardFiles', () => {
  it('answers / and client routes with index.html, never cached', async () => {
    for (const p of ['/', '/runs', '/runs/12/tasks/load', '/fleet?x=1']) {
      const r = await httpGet(`${url(built)}${p}`);
      expect(r.status, p).toBe(200);
      expect(r.headers['content-type']).toBe('text/html; charset=utf-8');
      expect(r.headers['cache-control']).toBe('no-cache');
      expect(r.body).toContain('<title>x</title>');
    }
  });

  it('serves hashed assets with their type and a year of caching; HEAD has no body', async () => {
    const js = await httpGet(`${url(built)}/assets/index-abc123.js`);
    expect(js.headers['content-type']).toBe('text/javascript; charset=utf-8');
    expect(js.headers['cache-control']).toBe('public, max-age=31536000, immutable');
    expect(js.body).toBe('console.log(1)');
    const css = await httpGet(`${url(built)}/assets/index-abc123.css`, { method: 'HEAD' });
    expect(css.headers['content-type']).toBe('text/css; charset=utf-8');
    expect(css.headers['content-length']).toBe('6');
    expect(css.body).toBe('');
  });

  it('sends text assets gzipped to a client that takes gzip', async () => {
    const r = await new Promise<{ encoding: string | undefined; body: string }>((resolve, reject) => {
      const req = http.request(
        `${url(built)}/assets/index-abc123.js`,
        { headers: { 'accept-encoding': 'gzip, br' }, agent: false },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () =>
            resolve({ encoding: res.headers['content-encoding'], body: gunzipSync(Buffer.concat(chunks)).toString() }),
          );
        },
      );
      req.on('error', reject);
      req.end();
    });
    expect(r).toEqual({ encoding: 'gzip', body: 'console.log(1)' });
  });

  it('answers 404 for a missing asset or file, not the page', async () => {
    expect((await httpGet(`${url(built)}/assets/index-old.js`)).status).toBe(404);
    expect((await httpGet(`${url(built)}/robots.txt`)).status).toBe(404);
  });

  it('never leaves its folder, however the path is spelt', async () => {
    for (const p of ['/../secret.txt', '/%2e%2e/secret.txt', '/assets/..%2f..%2fsecret.txt', '/..%5csecret.txt']) {
      const r = await httpGet(url(built), { path: p });
      expect(r.status, p).toBeGreaterThanOrEqual(400);
      expect(r.body, p).not.toContain('outside');
    }
    expect((await httpGet(url(built), { path: '/%E0%A4%A' })).status).toBe(400);
  });

  it('refuses other methods', async () => {
    const status = await new Promise<number>((resolve, reject) => {
      const req = http.request(`${url(built)}/`, { method: 'POST', agent: false }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on('error', reject);
      req.end();
    });
    expect(status).toBe(404);
  });

  it('without a build, says to run npm run build', async () => {
    const r = await httpGet(`${url(missing)}/`);
    expect(r.status).toBe(404);
    expect(r.body).toContain('Run `npm run build`');
  });
});
