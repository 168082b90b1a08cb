import http from 'node:http';
import { Registry, collectDefaultMetrics } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { createMetrics, schedulerCounters, type Metrics } from '../../src/server/observability/metrics.js';
import { serveMetrics } from '../../src/server/observability/serve-metrics.js';

/** The metrics DESIGN.md names, and ours beyond them, with their Prometheus types. */
const DESIGN_METRICS: Record<string, string> = {
  leoflow_tick_duration_seconds: 'histogram',
  leoflow_orphan_reaped_total: 'counter',
  leoflow_orphan_reap_errors_total: 'counter',
  leoflow_agent_lost_tasks_total: 'counter',
  leoflow_dispatch_queue_depth: 'gauge',
  leoflow_dispatch_at_capacity_total: 'counter',
  leoflow_dispatch_latency_seconds: 'histogram',
  leoflow_scheduler_panics_total: 'counter',
  leoflow_leader: 'gauge',
  leoflow_stale_reports_rejected_total: 'counter',
  // A zombie's output, refused with its end (issue 40).
  leoflow_stale_outputs_rejected_total: 'counter',
  // Beyond DESIGN.md's list ("at least"): how the subprocess executor started each attempt, and
  // the attempts the leader ended because their holder let them run past their timeout.
  leoflow_task_starts_total: 'counter',
  leoflow_timeouts_enforced_total: 'counter',
  // Agents' messages refused for breaking the protocol's rules (a bad client harms only itself).
  leoflow_agent_messages_invalid_total: 'counter',
  // The history keeper (retention): runs removed, partitions added and dropped, rows swept, errors.
  leoflow_history_runs_removed_total: 'counter',
  leoflow_history_partitions_total: 'counter',
  leoflow_history_rows_swept_total: 'counter',
  leoflow_history_errors_total: 'counter',
  // Agents forgotten: by the leader past the agent retention, or by hand (ForgetAgent).
  leoflow_agents_forgotten_total: 'counter',
  leoflow_api_auth_denied_total: 'counter',
  leoflow_api_limited_total: 'counter',
  leoflow_hook_refusals_total: 'counter',
  leoflow_notifications_total: 'counter',
  leoflow_api_connections_closed_total: 'counter',
  // The kubernetes executor (issue 24): pods created, creates refused by reason, time to running.
  leoflow_kubernetes_pods_created_total: 'counter',
  leoflow_kubernetes_pod_create_errors_total: 'counter',
  leoflow_kubernetes_pod_start_latency_seconds: 'histogram',
  // Health and alerts (issue 26): agent streams open, the queue's size, the tasks' wait and run
  // time by DAG, and the leader's view of the active runs and the waiting tasks.
  leoflow_agents_connected: 'gauge',
  leoflow_watchers_connected: 'gauge',
  leoflow_dispatch_queue_capacity: 'gauge',
  leoflow_task_duration_seconds: 'histogram',
  leoflow_task_queue_wait_seconds: 'histogram',
  leoflow_runs: 'gauge',
  leoflow_task_instances_waiting: 'gauge',
  leoflow_task_oldest_wait_seconds: 'gauge',
};

async function values(m: Metrics, name: string): Promise<{ value: number; labels: Record<string, unknown> }[]> {
  const metric = m.registry.getSingleMetric(name);
  expect(metric, name).toBeDefined();
  return (await metric!.get()).values.map((v) => ({ value: v.value, labels: { ...v.labels } }));
}

function request(
  port: number,
  path: string,
  method = 'GET',
): Promise<{ status: number; version: string; type: string; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path, method, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () =>
        resolve({ status: res.statusCode!, version: res.httpVersion, type: String(res.headers['content-type']), body }),
      );
      res.on('error', reject);
    });
    req.on('error', reject);
    req.setTimeout(5000, () => req.destroy(new Error(`request to ${path} timed out`)));
    req.end();
  });
}

describe('metrics', () => {
  it('registers exactly the metrics DESIGN.md names and ours beyond them, besides the process defaults', async () => {
    const m = createMetrics();
    const defaults = new Registry();
    collectDefaultMetrics({ register: defaults });
    const defaultNames = new Set((await defaults.getMetricsAsJSON()).map((x) => x.name));
    const ours = (await m.registry.getMetricsAsJSON()).filter((x) => !defaultNames.has(x.name));
    expect(Object.fromEntries(ours.map((x) => [x.name, String(x.type)]))).toEqual(DESIGN_METRICS);
    // Ours are prefixed, so a shared Prometheus never mixes them with another program's; the
    // process defaults keep their conventional names.
    expect(ours.filter((x) => !x.name.startsWith('leoflow_')).map((x) => x.name)).toEqual([]);
    expect([...defaultNames].every((n) => /^(process|nodejs)_/.test(n))).toBe(true);
    expect(await values(m, 'leoflow_leader')).toEqual([{ value: 0, labels: { role: 'auto' } }]);
    expect(await values(createMetrics({ role: 'observer' }), 'leoflow_leader')).toEqual([
      { value: 0, labels: { role: 'observer' } },
    ]);
  });

  it('keeps the metrics of two instances apart', async () => {
    const a = createMetrics();
    const b = createMetrics();
    a.agentLost.inc(3);
    expect((await values(a, 'leoflow_agent_lost_tasks_total'))[0]!.value).toBe(3);
    expect((await values(b, 'leoflow_agent_lost_tasks_total'))[0]!.value).toBe(0);
  });

  it('maps the scheduler counters onto the metrics', async () => {
    const m = createMetrics();
    const logged: { phase: string; err: unknown; ids: Record<string, unknown> | undefined }[] = [];
    const c = schedulerCounters(m, (phase, err, ids) => logged.push({ phase, err, ids }));
    const boom = new Error('boom');

    c.error('reap-runs', boom, { runId: '7' });
    expect(await values(m, 'leoflow_orphan_reap_errors_total')).toEqual([{ value: 1, labels: { kind: 'run' } }]);
    expect(await values(m, 'leoflow_scheduler_panics_total')).toEqual([{ value: 1, labels: { phase: 'reap-runs' } }]);
    expect(logged).toEqual([{ phase: 'reap-runs', err: boom, ids: { runId: '7' } }]);

    c.error('reap-heartbeats', boom, { tiId: '9' });
    c.error('plan', boom);
    c.error('plan.advance', boom, { runId: '8' });
    expect(await values(m, 'leoflow_orphan_reap_errors_total')).toEqual([
      { value: 1, labels: { kind: 'run' } },
      { value: 1, labels: { kind: 'ti' } },
    ]);
    expect(await values(m, 'leoflow_scheduler_panics_total')).toEqual([
      { value: 1, labels: { phase: 'reap-runs' } },
      { value: 1, labels: { phase: 'reap-heartbeats' } },
      { value: 1, labels: { phase: 'plan' } },
      { value: 1, labels: { phase: 'plan.advance' } },
    ]);
    expect(logged.map((l) => l.phase)).toEqual(['reap-runs', 'reap-heartbeats', 'plan', 'plan.advance']);

    c.reaped('run', 2);
    c.reaped('ti', 5);
    c.reaped('ti', 1);
    c.agentLost(5);
    c.agentLost(1);
    expect(await values(m, 'leoflow_orphan_reaped_total')).toEqual([
      { value: 2, labels: { kind: 'run' } },
      { value: 6, labels: { kind: 'ti' } },
    ]);
    expect(await values(m, 'leoflow_agent_lost_tasks_total')).toEqual([{ value: 6, labels: {} }]);
  });

  it('serves the text format on /metrics over HTTP/1.1, 404 elsewhere, and closes', { timeout: 15_000 }, async () => {
    const m = createMetrics();
    m.leader.set(1);
    schedulerCounters(m, () => {}).reaped('run', 2);
    const server = await serveMetrics(m, '127.0.0.1', 0);
    const port = server.address.port;
    expect(server.address.address).toBe('127.0.0.1');
    expect(port).toBeGreaterThan(0);
    try {
      const ok = await request(port, '/metrics');
      expect(ok.status).toBe(200);
      expect(ok.version).toBe('1.1');
      expect(ok.type).toBe(m.registry.contentType);
      expect(ok.type).toMatch(/^text\/plain; version=0\.0\.4/);
      for (const name of Object.keys(DESIGN_METRICS))
        expect(ok.body).toContain(`# TYPE ${name} ${DESIGN_METRICS[name]}`);
      expect(ok.body).toMatch(/^leoflow_leader\{role="auto"\} 1$/m);
      expect(ok.body).toMatch(/^leoflow_orphan_reaped_total\{kind="run"\} 2$/m);
      expect(ok.body).toMatch(/^leoflow_tick_duration_seconds_count 0$/m);

      expect((await request(port, '/metrics?name[]=leoflow_leader')).status).toBe(200);
      for (const path of ['/', '/metricsx', '/other/metrics']) {
        const nf = await request(port, path);
        expect(nf.status, path).toBe(404);
        expect(nf.body).toContain('/metrics');
      }
      expect((await request(port, '/metrics', 'POST')).status).toBe(404);
    } finally {
      await server.close();
    }
    await expect(request(port, '/metrics')).rejects.toMatchObject({ code: 'ECONNREFUSED' });
  });
});
