import { afterAll, afterEach, beforeAll } from 'vitest';
import { createClients, type Clients } from '../../src/cli/client.js';
import {
  scratchDir,
  serverLauncher,
  startAgent,
  startServer,
  waitFor,
  type AgentProcess,
  type ServerProcess,
} from './leoflow-process.js';
import { killGroupOf } from './process-group.js';
import { createTestDatabase, type TestDatabase } from './test-database.js';

/** A real `leoflow server` on a database of its own, for one test file (see `serverForFile`). */
export interface ServerFixture {
  db: TestDatabase;
  server: ServerProcess;
  /** Clients of the server's API. */
  api: Clients;
  /** A scratch folder, removed when the test process exits. */
  tmp: string;
}

export interface ServerFixtureOptions {
  /** Extra flags of `leoflow server` (a function: read when the server starts, after the file's earlier hooks). */
  args?: string[] | (() => string[]);
  /** Merged over the test process's environment (DATABASE_URL is the file's database). */
  env?: Record<string, string | undefined>;
  /** The scratch folder's name starts so, to tell whose it is. */
  tmpPrefix?: string;
}

/**
 * The way most e2e files begin: registers a beforeAll that starts the server on a database of its
 * own, and an afterAll that stops it and drops the database. The fields are set once beforeAll ran.
 * Hooks the file registers after this call run first at the end (vitest stacks after-hooks), so a
 * file stops its own agents before the server goes.
 */
export function serverForFile(opts: ServerFixtureOptions = {}): ServerFixture {
  const f = {} as ServerFixture;
  beforeAll(async () => {
    f.db = await createTestDatabase();
    f.tmp = scratchDir(opts.tmpPrefix ?? 'leoflow-e2e-');
    f.server = await startServer({
      env: { DATABASE_URL: f.db.url, ...opts.env },
      args: typeof opts.args === 'function' ? opts.args() : opts.args,
    });
    f.api = createClients(f.server.url);
  }, 60_000);
  afterAll(async () => {
    await f.server?.stop();
    await f.db?.drop();
  });
  return f;
}

/** Starts a `leoflow agent` with this id on `f`'s server and waits until the server says it is connected. */
export async function connectedAgent(
  f: ServerFixture,
  agentId: string,
  opts: {
    args?: string[];
    env?: Record<string, string | undefined>;
    /** Another way to the server (a proxy). */ url?: string;
  } = {},
): Promise<AgentProcess> {
  const agent = startAgent(opts.url ?? f.server.url, ['--id', agentId, ...(opts.args ?? [])], { env: opts.env });
  await waitFor(
    `agent ${agentId} connected`,
    async () => (await f.api.cluster.listAgents({})).agents.some((a) => a.agentId === agentId && a.connected),
    20_000,
  );
  return agent;
}

/** The agents a test starts, and the task processes it saw, stopped after each test (see `agentsOfEachTest`). */
export interface AgentsOfEachTest {
  /** Starts an agent (`connectedAgent`, through `url` if given), stopped after the test. */
  connect(agentId: string, args?: string[], url?: string): Promise<AgentProcess>;
  /** The agents this test started. */
  started: readonly AgentProcess[];
  /** Task processes whose groups are killed after the test (an agent killed hard leaves them). */
  taskPids: Set<number>;
}

/**
 * Registers an afterEach that kills the task groups first (so no agent waits for a task to stop),
 * then stops the agents the test started.
 */
export function agentsOfEachTest(f: ServerFixture): AgentsOfEachTest {
  const agents: AgentProcess[] = [];
  const taskPids = new Set<number>();
  afterEach(async () => {
    for (const pid of taskPids) killGroupOf(pid);
    taskPids.clear();
    await Promise.all(agents.splice(0).map((a) => a.stop(5000)));
  });
  return {
    taskPids,
    started: agents,
    async connect(agentId, args = [], url) {
      const agent = await connectedAgent(f, agentId, { args, url });
      agents.push(agent);
      return agent;
    },
  };
}

/** Replicas of the control plane on one database, for one test file (see `replicasForFile`). */
export interface ReplicasFixture {
  db: TestDatabase;
  /** A scratch folder, removed when the test process exits. */
  tmp: string;
  /** The servers the file started: killed after all its tests. */
  servers: ServerProcess[];
  /** The agents the file started: stopped after all its tests, before the servers. */
  agents: AgentProcess[];
  /** Task processes that may outlive their control plane: their groups are killed first. */
  taskPids: Set<number>;
  /** Starts servers on the file's database with `args` and then each call's own (`serverLauncher`). */
  launcher(args?: readonly string[]): (extraArgs?: readonly string[]) => Promise<ServerProcess>;
}

/**
 * The way the multi-replica files begin: a database of their own made beforeAll; after all their
 * tests (or after each, with `eachTest`), the task groups killed, their agents stopped and their
 * servers killed (they may be frozen or half-stopped by the test); at last the database dropped.
 */
export function replicasForFile(opts: { tmpPrefix?: string; eachTest?: boolean } = {}): ReplicasFixture {
  const f: ReplicasFixture = {
    db: undefined as never,
    tmp: undefined as never,
    servers: [],
    agents: [],
    taskPids: new Set(),
    launcher: (args) => serverLauncher({ databaseUrl: () => f.db.url, args, servers: f.servers }),
  };
  beforeAll(async () => {
    f.db = await createTestDatabase();
    f.tmp = scratchDir(opts.tmpPrefix ?? 'leoflow-replicas-');
  });
  const stopAll = async () => {
    for (const pid of f.taskPids) killGroupOf(pid);
    f.taskPids.clear();
    for (const a of f.agents.splice(0)) await a.stop(5000);
    for (const s of f.servers.splice(0)) await s.kill();
  };
  if (opts.eachTest) afterEach(stopAll);
  afterAll(async () => {
    await stopAll();
    await f.db?.drop();
  });
  return f;
}
