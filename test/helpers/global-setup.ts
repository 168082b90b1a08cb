import { mkdtemp, rm } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import type { TestProject } from 'vitest/node';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../../src/db/embedded-postgres.js';
import { migrate } from '../../src/db/migrate.js';
import { createSql } from '../../src/db/sql.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** A URL on the test server with the right to create databases. */
    pgAdminUrl: string;
    /** Name of a database with every migration applied, to copy per test file. */
    pgTemplate: string;
  }
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as net.AddressInfo;
      srv.close(() => resolve(port));
    });
  });
}

function withDatabase(url: string, db: string): string {
  const u = new URL(url);
  u.pathname = `/${db}`;
  return u.toString();
}

/**
 * Vitest runs this once per project, and once more for the root config, which runs no test. The
 * unit project needs no database (nor does the root): they get none, so unit tests start at once.
 */
const WITHOUT_DATABASE = new Set(['unit', '']);

export default async function setup(project: TestProject) {
  if (WITHOUT_DATABASE.has(project.name)) return;
  let embedded: EmbeddedPostgres | undefined;
  let stateDir: string | undefined;
  let adminUrl = process.env.TEST_DATABASE_URL;
  if (!adminUrl) {
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'leoflow-test-pg-'));
    embedded = await startEmbeddedPostgres({ stateDir, port: await freePort(), logger: pino({ level: 'warn' }) });
    adminUrl = embedded.adminUrl;
  }
  const template = `leoflow_template_${process.pid}_${Date.now().toString(36)}`;
  const admin = createSql(adminUrl, { max: 1 });
  await admin.unsafe(`create database "${template}"`);
  const tsql = createSql(withDatabase(adminUrl, template), { max: 1 });
  await migrate(tsql);
  await tsql.end();
  project.provide('pgAdminUrl', adminUrl);
  project.provide('pgTemplate', template);

  return async () => {
    await admin.unsafe(`drop database if exists "${template}" with (force)`);
    await admin.end();
    await embedded?.stop();
    if (stateDir) await rm(stateDir, { recursive: true, force: true });
  };
}
