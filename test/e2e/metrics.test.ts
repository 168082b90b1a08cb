import { describe, expect, it } from 'vitest';
import { cli, waitFor } from '../helpers/leoflow-process.js';
import { promtool, promtoolMissing } from '../helpers/promtool.js';
import { scrapeMetrics } from '../helpers/scrape-metrics.js';
import { serverForFile } from '../helpers/server-fixture.js';
import { applyDag } from '../helpers/applied-dag.js';

/**
 * A Lite server's /metrics after a run: the per-DAG task histograms, the cluster gauges its
 * leader reports, the per-replica ones, and the page as Prometheus' own linter reads it.
 */

const f = serverForFile({ tmpPrefix: 'leoflow-metrics-', args: ['--dags', 'examples'] });

describe('metrics', () => {
  it("reports each task's queue wait and duration by DAG and outcome, and the active runs and waiting tasks from the leader", async () => {
    const r = await cli(f.server.url, ['run', 'trigger', 'hello', '--wait']);
    expect(r.code, r.stderr).toBe(0);
    // The end is written before the run is seen finished; the histogram is observed as it is written.
    const m = await waitFor(
      'both ends observed',
      async () => {
        const s = await scrapeMetrics(f.server.metricsUrl);
        return (s.get('leoflow_task_duration_seconds_count{dag="hello",outcome="success"}') ?? 0) >= 2 ? s : null;
      },
      10_000,
    );
    expect(m.get('leoflow_task_queue_wait_seconds_count{dag="hello"}')).toBe(2);
    // The wait of a task of a one-run chain on an idle server is its start: well under a second each.
    expect(m.get('leoflow_task_queue_wait_seconds_bucket{le="1",dag="hello"}')).toBe(2);
    expect(m.get('leoflow_task_duration_seconds_sum{dag="hello",outcome="success"}')).toBeGreaterThanOrEqual(0);
    expect(m.get('leoflow_leader{role="auto"}')).toBe(1);
    expect(m.get('leoflow_runs{state="running"}')).toBe(0);
    expect(m.get('leoflow_runs{state="queued"}')).toBe(0);
    expect(m.get('leoflow_dispatch_queue_capacity')).toBe(1);
    expect(m.get('leoflow_agents_connected')).toBe(0);
  });

  it('reports a task waiting for agents, and how long the oldest has waited', async () => {
    await applyDag(
      f.server.url,
      f.tmp,
      'dag_id: needs_agent\ntasks:\n  - { id: t, command: ["true"], executor: agents }\n',
    );
    expect((await cli(f.server.url, ['run', 'trigger', 'needs_agent'])).code).toBe(0);
    const m = await waitFor(
      'the waiting task counted',
      async () => {
        const s = await scrapeMetrics(f.server.metricsUrl);
        return (s.get('leoflow_task_instances_waiting{executor="agents"}') ?? 0) === 1 &&
          (s.get('leoflow_task_oldest_wait_seconds{executor="agents"}') ?? 0) > 0
          ? s
          : null;
      },
      15_000,
      500,
    );
    expect(m.get('leoflow_runs{state="running"}')).toBe(1);
    expect(m.get('leoflow_task_oldest_wait_seconds{executor="agents"}')).toBeLessThan(30);
  });

  it.skipIf(promtoolMissing)(
    "passes promtool check metrics (only prom-client's own nodejs_active_* names are flagged)",
    async () => {
      const page = await (await fetch(f.server.metricsUrl)).text();
      const r = promtool(['check', 'metrics'], page);
      const problems = r.out.split('\n').filter((l) => l.trim() !== '');
      // prom-client's default process metrics name three gauges `nodejs_active_*_total`: not ours to rename.
      expect(
        problems.filter(
          (l) =>
            !/^nodejs_active_(handles|requests|resources)_total non-counter metrics should not have "_total" suffix$/.test(
              l,
            ),
        ),
      ).toEqual([]);
      // Every family of ours is prefixed leoflow_ (a shared Prometheus keeps them apart); the process
      // defaults keep the names Node.js dashboards expect.
      const families = [...page.matchAll(/^# TYPE (\S+) /gm)].map((m) => m[1]!);
      expect(families.filter((n) => !/^(leoflow|process|nodejs)_/.test(n))).toEqual([]);
      expect(families.filter((n) => n.startsWith('leoflow_')).length).toBeGreaterThanOrEqual(30);
    },
  );
});
