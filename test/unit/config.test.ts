import { configProblems } from '../helpers/config-problems.js';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/server/config/load-config.js';

/** The configuration of each edition with nothing set (Pro needs its database). */
const liteDefaults = () => loadConfig({}, {}, '/srv');
const proDefaults = () =>
  loadConfig({ edition: 'pro', executor: 'subprocess' }, { DATABASE_URL: 'postgres://127.0.0.1/x' }, '/srv');

describe('config', () => {
  it('fills the lite edition defaults', () => {
    const c = liteDefaults();
    expect(c).toMatchObject({
      edition: 'lite',
      listenHost: '127.0.0.1',
      listenPort: 7070,
      databaseUrl: null,
      stateDir: '/srv/.leoflow',
      executor: 'subprocess',
      tickMs: 1000,
      dispatchWorkers: 1,
      dispatchQueue: 1,
      runOrphanThresholdMs: 300_000,
      heartbeatThresholdMs: 90_000,
    });
  });

  it('takes --advertise-url as a bare http(s) URL of the scheme this replica serves, and names a bad one', () => {
    expect(liteDefaults().advertiseUrl).toBeNull();
    expect(loadConfig({ advertise_url: 'http://10.0.0.5:7070/' }, {}, '/srv').advertiseUrl).toBe(
      'http://10.0.0.5:7070',
    );
    expect(configProblems({ advertise_url: 'leoflow:7070' })).toEqual([
      '--advertise-url: must be an http:// or https:// URL, got protocol "leoflow:"',
    ]);
    expect(configProblems({ advertise_url: 'http://10.0.0.5:7070/api' })).toEqual([
      '--advertise-url: must name a host and port only, no path, got "http://10.0.0.5:7070/api"',
    ]);
    expect(configProblems({ advertise_url: 'https://10.0.0.5:7070' })).toEqual([
      '--advertise-url: must be http:// as this replica serves plain HTTP (no --tls-cert), got https://10.0.0.5:7070',
    ]);
  });

  it('takes flags over environment over edition file', () => {
    const c = loadConfig(
      { dispatch_workers: '4', tick_interval: '250ms' },
      { LEOFLOW_DISPATCH_WORKERS: '2', LEOFLOW_DISPATCH_QUEUE: '8', DATABASE_URL: 'postgres://u@127.0.0.1/db' },
      '/srv',
    );
    expect(c.dispatchWorkers).toBe(4);
    expect(c.dispatchQueue).toBe(8);
    expect(c.tickMs).toBe(250);
    expect(c.databaseUrl).toBe('postgres://u@127.0.0.1/db');
  });

  it('uses the pro edition defaults and demands a database', () => {
    expect(configProblems({ edition: 'pro', executor: 'subprocess' })).toEqual([
      'the pro edition needs a Postgres server: set DATABASE_URL or --database-url',
    ]);
    const c = loadConfig(
      { edition: 'pro', executor: 'subprocess' },
      { DATABASE_URL: 'postgres://127.0.0.1/x' },
      '/srv',
    );
    expect(c).toMatchObject({ edition: 'pro', dispatchWorkers: 16, dispatchQueue: 256 });
  });

  it("reads the kubernetes executor settings, Pro's default, and asks for the image its pods run", () => {
    const env = { DATABASE_URL: 'postgres://127.0.0.1/x' };
    expect(configProblems({ edition: 'pro' }, env)).toEqual([
      'the kubernetes executor needs the image its pods run (the Leoflow image): set --kubernetes-image or LEOFLOW_KUBERNETES_IMAGE',
    ]);
    const c = loadConfig({ edition: 'pro', kubernetes_image: 'ghcr.io/acme/leoflow:1.0' }, env, '/srv');
    expect(c.executor).toBe('kubernetes');
    expect(c.kubernetes).toEqual({
      namespace: 'leoflow-tasks',
      image: 'ghcr.io/acme/leoflow:1.0',
      kubeconfig: { kind: 'auto' },
      serverUrl: 'http://leoflow.leoflow.svc:7070',
      agentCommand: ['leoflow'],
      podPendingTimeoutMs: 300_000,
      keepSucceededMs: 0,
      keepFailedMs: 3_600_000,
      agentTokenSecret: null,
      podCa: null,
      podTemplate: null,
      maxFreeRetries: 3,
      controlPlaneNamespace: null,
    });
    // Tasks never run in the control plane's own namespace (its Secrets, its ServiceAccount).
    expect(
      configProblems({ edition: 'pro', kubernetes_image: 'x', control_plane_namespace: 'leoflow-tasks' }, env),
    ).toEqual([
      'kubernetes_namespace "leoflow-tasks" is the control plane\'s own namespace (--control-plane-namespace): task pods there could read its Secrets and run as its ServiceAccount; give tasks a namespace of their own (the Pro default is leoflow-tasks)',
    ]);
    expect(configProblems({ edition: 'pro', kubernetes_image: 'x', max_free_retries: '-1' }, env)).toEqual([
      '--max-free-retries: must be a whole number from 0 to 1000, got "-1"',
    ]);
    expect(
      loadConfig({ edition: 'pro', kubernetes_image: 'x', pod_agent_token_secret: 'leoflow-agent' }, env, '/srv')
        .kubernetes!.agentTokenSecret,
    ).toEqual({ name: 'leoflow-agent', key: 'agent-token' });
    expect(
      loadConfig({ edition: 'pro', kubernetes_image: 'x', pod_agent_token_secret: 'leoflow/token' }, env, '/srv')
        .kubernetes!.agentTokenSecret,
    ).toEqual({ name: 'leoflow', key: 'token' });
    expect(configProblems({ edition: 'pro', kubernetes_image: 'x', pod_agent_token_secret: 'Bad_Name' }, env)).toEqual([
      '--pod-agent-token-secret: must be SECRET or SECRET/KEY (a Secret\'s name, a DNS-1123 subdomain), got "Bad_Name": must be a DNS-1123 subdomain: lower-case letters, digits, "-" and ".", starting and ending with a letter or digit',
    ]);
    const k = loadConfig(
      { executor: 'kubernetes', kubeconfig: 'kube/config', pod_server_url: 'http://cp:7070', pod_keep_failed: '10m' },
      {
        LEOFLOW_KUBERNETES_IMAGE: 'leoflow:dev',
        LEOFLOW_KUBERNETES_NAMESPACE: 'jobs',
        LEOFLOW_POD_PENDING_TIMEOUT: '30s',
        LEOFLOW_POD_AGENT_COMMAND: 'node,/app/dist/cli/main.js',
      },
      '/srv',
    ).kubernetes;
    expect(k).toMatchObject({
      namespace: 'jobs',
      kubeconfig: { kind: 'file', path: '/srv/kube/config' },
      podPendingTimeoutMs: 30_000,
      keepFailedMs: 600_000,
      agentCommand: ['node', '/app/dist/cli/main.js'],
    });
    expect(
      loadConfig(
        { executor: 'kubernetes', kubeconfig: 'in-cluster', pod_server_url: 'http://cp:7070', kubernetes_image: 'x' },
        {},
        '/srv',
      ).kubernetes!.kubeconfig,
    ).toEqual({ kind: 'in-cluster' });
    expect(liteDefaults().kubernetes).toBeNull();
  });

  it('reports every bad kubernetes setting with its flag or variable', () => {
    expect(
      configProblems(
        {
          executor: 'kubernetes',
          kubernetes_namespace: 'Jobs',
          kubernetes_image: 'a b',
          pod_server_url: 'leoflow:7070',
          pod_pending_timeout: '0s',
        },
        { LEOFLOW_POD_KEEP_FAILED: 'soon' },
      ),
    ).toEqual([
      '--kubernetes-image: must be an image reference without spaces, got "a b"',
      '--kubernetes-namespace: must be a DNS-1123 label: lower-case letters, digits and "-", starting and ending with a letter or digit, got "Jobs"',
      '--pod-server-url: must be an http:// or https:// URL, got protocol "leoflow:"',
      '--pod-pending-timeout: must be a positive duration, got "0s"',
      'LEOFLOW_POD_KEEP_FAILED (environment): expected a duration like "30s", "5m" or "1h30m", got "soon"',
    ]);
    expect(configProblems({ executor: 'kubernetes', kubernetes_image: 'x' })).toEqual([
      'the kubernetes executor needs the address pods reach the control plane at: set --pod-server-url or LEOFLOW_POD_SERVER_URL (e.g. http://leoflow:7070)',
    ]);
  });

  it('reports every bad value with the flag or variable it came from', () => {
    expect(
      configProblems(
        { dispatch_workers: '0', tick_interval: 'soon', listen: 'localhost', log_format: 'xml' },
        { LEOFLOW_DISPATCH_QUEUE: '-3', DATABASE_URL: 'mysql://x' },
      ),
    ).toEqual([
      '--listen: must be HOST:PORT (e.g. 127.0.0.1:7070), got "localhost"',
      'DATABASE_URL (environment): must be a postgres:// URL, got protocol "mysql:"',
      '--tick-interval: expected a duration like "30s", "5m" or "1h30m", got "soon"',
      '--dispatch-workers: must be a positive integer, got "0"',
      'LEOFLOW_DISPATCH_QUEUE (environment): must be a positive integer, got "-3"',
      '--log-format: must be one of json, pretty, got "xml"',
    ]);
  });

  it('reads the retention per edition, in days or off', () => {
    expect(liteDefaults().retentionMs).toBe(30 * 86_400_000);
    expect(proDefaults().retentionMs).toBe(90 * 86_400_000);
    expect(loadConfig({ retention: '7d12h' }, {}, '/srv').retentionMs).toBe(7.5 * 86_400_000);
    expect(loadConfig({}, { LEOFLOW_RETENTION: 'off' }, '/srv').retentionMs).toBeNull();
    expect(loadConfig({ retention: '0' }, {}, '/srv').retentionMs).toBeNull();
    expect(configProblems({ retention: '30' })).toEqual([
      '--retention: must be a duration with a unit, such as 30d, or off (or 0), got "30"',
    ]);
    expect(configProblems({ retention: 'forever' })).toEqual([
      '--retention: expected a duration like "30s", "5m" or "1h30m", got "forever"',
    ]);
  });

  it('reads the agent retention, 7 days in both editions, or off, and names a bad value exactly', () => {
    expect(liteDefaults().agentRetentionMs).toBe(7 * 86_400_000);
    expect(proDefaults().agentRetentionMs).toBe(7 * 86_400_000);
    expect(loadConfig({ agent_retention: '36h' }, {}, '/srv').agentRetentionMs).toBe(36 * 3_600_000);
    expect(loadConfig({}, { LEOFLOW_AGENT_RETENTION: '2d' }, '/srv').agentRetentionMs).toBe(2 * 86_400_000);
    expect(loadConfig({ agent_retention: 'off' }, {}, '/srv').agentRetentionMs).toBeNull();
    expect(configProblems({ agent_retention: '7' })).toEqual([
      '--agent-retention: must be a duration with a unit, such as 7d, or off (or 0), got "7"',
    ]);
    expect(configProblems({}, { LEOFLOW_AGENT_RETENTION: 'a week' })).toEqual([
      'LEOFLOW_AGENT_RETENTION (environment): expected a duration like "30s", "5m" or "1h30m", got "a week"',
    ]);
  });

  it('rejects an unknown edition', () => {
    expect(configProblems({ edition: 'enterprise' })).toEqual([
      '--edition: must be one of lite, pro, got "enterprise"',
    ]);
  });

  it('refuses a heartbeat threshold that could reap live tasks', () => {
    expect(configProblems({ heartbeat_interval: '10s', heartbeat_threshold: '20s' })).toEqual([
      'heartbeat_threshold (20000 ms) must be at least 3 × heartbeat_interval (10000 ms), or a live task could be reaped',
    ]);
  });

  it('reads the role from the flag or LEOFLOW_ROLE, auto by default, with its leader timeout', () => {
    expect(liteDefaults()).toMatchObject({ role: 'auto', leaderTimeoutMs: 30_000, loopStallMs: 60_000 });
    expect(loadConfig({}, { LEOFLOW_ROLE: 'worker' }, '/srv').role).toBe('worker');
    expect(loadConfig({ role: 'leader', leader_timeout: '5s' }, { LEOFLOW_ROLE: 'worker' }, '/srv')).toMatchObject({
      role: 'leader',
      leaderTimeoutMs: 5000,
    });
    expect(configProblems({ role: 'boss' })).toEqual([
      '--role: must be one of auto, leader, worker, observer, got "boss"',
    ]);
    expect(configProblems({}, { LEOFLOW_ROLE: 'Observer' })).toEqual([
      'LEOFLOW_ROLE (environment): must be one of auto, leader, worker, observer, got "Observer"',
    ]);
    expect(configProblems({ role: 'leader', leader_timeout: 'never' })).toEqual([
      '--leader-timeout: expected a duration like "30s", "5m" or "1h30m", got "never"',
    ]);
  });

  it('refuses DAG files to apply on an observer, which writes nothing', () => {
    expect(configProblems({ role: 'observer', dags: 'examples' })).toEqual([
      '--dags: a replica with role observer applies no DAG files; apply them from a replica of another role',
    ]);
    expect(loadConfig({ role: 'observer' }, {}, '/srv').role).toBe('observer');
  });

  it('refuses a replica id too long for its Postgres session names, or with odd characters', () => {
    expect(configProblems({ replica_id: 'r'.repeat(39) })).toEqual([
      "--replica-id: must be at most 38 characters (it names the replica's Postgres sessions), got 39",
    ]);
    expect(configProblems({ replica_id: 'a b' })).toEqual([
      `--replica-id: must be letters, digits, '.', '_' or '-', got "a b"`,
    ]);
    expect(liteDefaults().replicaId.length).toBeLessThanOrEqual(38);
  });

  it('refuses a loop stall threshold the loop would cross at its own pace, and follows a slow tick by default', () => {
    expect(loadConfig({ tick_interval: '30s' }, {}, '/srv').loopStallMs).toBe(150_000);
    expect(loadConfig({ tick_interval: '200ms', loop_stall_threshold: '1s' }, {}, '/srv').loopStallMs).toBe(1000);
    expect(configProblems({ loop_stall_threshold: '2s', tick_interval: '1s' })).toEqual([
      'loop_stall_threshold (2000 ms) must be at least 3 × tick_interval (1000 ms), or a loop keeping its pace would be called stalled',
    ]);
  });
});

describe('editions', () => {
  it('differ only in the levers an edition may set, so a contract test that does not start a server covers both', async () => {
    // What DESIGN.md lets an edition change: its name, where it listens, its database, its state
    // folder, its executor and dispatch pool, its retention. Settings only one edition has (an
    // executor's own) are that edition's. Everything else the state machine, the reapers and
    // fencing depend on (tick, thresholds, heartbeats, grace periods, watchdog) must be equal:
    // the integration tests of those run once, without an edition, and stand for both.
    const { readFileSync } = await import('node:fs');
    const read = (e: string) =>
      JSON.parse(readFileSync(new URL(`../../editions/${e}/config.json`, import.meta.url), 'utf8')) as Record<
        string,
        unknown
      >;
    const lite = read('lite');
    const pro = read('pro');
    const mayDiffer = new Set([
      'edition',
      'listen',
      'metrics_listen',
      'database',
      'state_dir',
      'executor',
      'dispatch_workers',
      'dispatch_queue',
      'retention',
    ]);
    const differ = Object.keys(lite).filter((k) => k in pro && JSON.stringify(lite[k]) !== JSON.stringify(pro[k]));
    expect(differ.filter((k) => !mayDiffer.has(k))).toEqual([]);
    for (const k of [
      'tick_interval',
      'run_orphan_threshold',
      'heartbeat_threshold',
      'heartbeat_interval',
      'kill_grace',
      'leader_watchdog',
    ]) {
      expect(k in lite && k in pro, k).toBe(true);
    }
  });

  it('requires auth in Pro and in Lite off loopback, unless --insecure', () => {
    const pro = { edition: 'pro', executor: 'subprocess', database: 'postgres://x@h/db' } as const;
    expect(liteDefaults()).toMatchObject({ authRequired: false, insecure: false });
    expect(loadConfig({ listen: 'localhost:7070' }, {}, '/srv').authRequired).toBe(false);
    expect(loadConfig({ listen: '[::1]:7070' }, {}, '/srv').authRequired).toBe(false);
    expect(loadConfig({ listen: '0.0.0.0:7070' }, {}, '/srv').authRequired).toBe(true);
    expect(loadConfig({ listen: '10.1.2.3:7070' }, {}, '/srv').authRequired).toBe(true);
    expect(loadConfig({ listen: '0.0.0.0:7070', insecure: 'true' }, {}, '/srv')).toMatchObject({
      authRequired: false,
      insecure: true,
    });
    expect(loadConfig(pro, {}, '/srv').authRequired).toBe(true);
    expect(loadConfig(pro, { LEOFLOW_INSECURE: 'true' }, '/srv').authRequired).toBe(false);
    expect(configProblems({ insecure: 'yes' })).toEqual(['--insecure: must be true or false, got "yes"']);
  });

  it('takes a bootstrap admin token only if it is long enough to be a random secret', () => {
    expect(loadConfig({}, { LEOFLOW_BOOTSTRAP_ADMIN_TOKEN: 'x'.repeat(32) }, '/srv').bootstrapAdminToken).toBe(
      'x'.repeat(32),
    );
    expect(configProblems({ bootstrap_admin_token: 'hunter2' })).toEqual([
      '--bootstrap-admin-token: must be at least 32 characters of a random secret (e.g. `openssl rand -base64 32`), got 7',
    ]);
  });
});
