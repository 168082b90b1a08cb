import type { Command } from 'commander';
import type { Clients } from './client.js';

/**
 * Every `leoflow` command, and how to load it. A command's module (and what it imports: the
 * server for `server`, grpc-js for `agent`, the API client for the rest) is imported only when
 * that command runs, so a client command starts in the time of its own modules. `leoflow --help`
 * lists the commands from here without loading any.
 */
export interface CommandEntry {
  /** The word after `leoflow`. */
  name: string;
  /** Its line in `leoflow --help`: the same as its module's `.description()` (a unit test checks). */
  description: string;
  /** Whether it calls the control plane's API: its module then gets the API clients. */
  api: boolean;
  /** Imports the command's module and adds the command to the program. */
  register: (program: Command, clients: () => Clients) => Promise<void>;
}

export const commandTable: readonly CommandEntry[] = [
  {
    name: 'server',
    description: 'run a control-plane replica (API, scheduler, executor)',
    api: false,
    register: async (program) => (await import('./commands/server.js')).registerServer(program),
  },
  {
    name: 'dag',
    description: 'apply and inspect DAGs',
    api: true,
    register: async (program, clients) => (await import('./commands/dag.js')).registerDag(program, clients),
  },
  {
    name: 'run',
    description: 'trigger and inspect DAG runs',
    api: true,
    register: async (program, clients) => (await import('./commands/run.js')).registerRun(program, clients),
  },
  {
    name: 'event',
    description: 'send events in: each DAG they trigger starts a run',
    api: true,
    register: async (program, clients) => (await import('./commands/event.js')).registerEvent(program, clients),
  },
  {
    name: 'notifications',
    description: 'what was told of ended runs, and to whom (--notify): delivered, pending or failed',
    api: true,
    register: async (program, clients) =>
      (await import('./commands/notifications.js')).registerNotifications(program, clients),
  },
  {
    name: 'logs',
    description: "print the log lines of a run's tasks",
    api: true,
    register: async (program, clients) => (await import('./commands/logs.js')).registerLogs(program, clients),
  },
  {
    name: 'agent',
    description: 'run an agent: connect to the control plane (--server, one or more) and run the tasks it assigns',
    api: false,
    register: async (program) => (await import('./commands/agent.js')).registerAgent(program),
  },
  {
    name: 'agents',
    description: 'list, drain and forget the agents known to the control plane',
    api: true,
    register: async (program, clients) => (await import('./commands/agents.js')).registerAgents(program, clients),
  },
  {
    name: 'replicas',
    description: 'list the control-plane replicas serving the database, with their roles and the leader',
    api: true,
    register: async (program, clients) => (await import('./commands/replicas.js')).registerReplicas(program, clients),
  },
  {
    name: 'status',
    description:
      "the cluster's health at a glance: this replica, the database, the leader's loop, the queue, " +
      'the agents (exit 1 when not live or not ready)',
    api: true,
    register: async (program, clients) => (await import('./commands/status.js')).registerStatus(program, clients),
  },
  {
    name: 'db',
    description: 'maintain the database',
    api: true,
    register: async (program, clients) => (await import('./commands/db.js')).registerDb(program, clients),
  },
  {
    name: 'token',
    description: 'API tokens and agent credentials (admin only; --database-url to make the first admin token)',
    api: true,
    register: async (program, clients) => (await import('./commands/token.js')).registerToken(program, clients),
  },
];
