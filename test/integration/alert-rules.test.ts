import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { createMetrics } from '../../src/server/observability/metrics.js';
import { promtool, promtoolMissing } from '../helpers/promtool.js';

/**
 * The alerting rules shipped in editions/pro/prometheus: valid for Prometheus (`promtool check
 * rules`), each one firing on a series that should trigger it and silent on one that should not
 * (`promtool test rules`), each with a summary and a runbook line, and naming only metrics the
 * server exports.
 */

const DIR = path.resolve(import.meta.dirname, '../../editions/pro/prometheus');
const RULES = path.join(DIR, 'leoflow-alerts.yaml');
const TESTS = path.join(DIR, 'leoflow-alerts.test.yaml');

interface Rule {
  alert: string;
  expr: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}
const rules: Rule[] = (parse(readFileSync(RULES, 'utf8')) as { groups: { rules: Rule[] }[] }).groups.flatMap(
  (g) => g.rules,
);

describe.skipIf(promtoolMissing)('alerting rules, with promtool', () => {
  it('are valid rules', () => {
    const r = promtool(['check', 'rules', RULES]);
    expect(r.out).toContain(`SUCCESS: ${rules.length} rules found`);
    expect(r.status).toBe(0);
  });

  it('pass their unit tests: each alert fires when it should and stays silent when it should not', () => {
    const r = promtool(['test', 'rules', TESTS]);
    expect(r.out, r.out).toContain('SUCCESS');
    expect(r.status).toBe(0);
  });
});

describe('alerting rules', () => {
  it("cover the issue's set, each with a severity, a summary and a runbook line", () => {
    expect(rules.map((r) => r.alert).sort()).toEqual(
      [
        'LeoflowAgentLostTasks',
        'LeoflowDispatchQueueCritical',
        'LeoflowDispatchQueueHigh',
        'LeoflowNoAgentsForWaitingWork',
        'LeoflowNoLeader',
        'LeoflowReaperErrors',
        'LeoflowStaleReportsSurge',
        'LeoflowTaskFailureRate',
        'LeoflowTaskWaitOver60s',
        'LeoflowTickSlow',
      ].sort(),
    );
    for (const r of rules) {
      expect(['warning', 'critical'], r.alert).toContain(r.labels?.severity);
      expect(r.annotations?.summary, r.alert).toBeTruthy();
      expect(r.annotations?.runbook?.length ?? 0, r.alert).toBeGreaterThan(40);
    }
  });

  it('each have a firing and a silent case in the unit tests', () => {
    const tests = (
      parse(readFileSync(TESTS, 'utf8')) as {
        tests: { alert_rule_test: { alertname: string; exp_alerts: unknown[] }[] }[];
      }
    ).tests.flatMap((t) => t.alert_rule_test);
    for (const r of rules) {
      const mine = tests.filter((t) => t.alertname === r.alert);
      expect(
        mine.some((t) => t.exp_alerts.length > 0),
        `${r.alert} fires somewhere`,
      ).toBe(true);
      expect(
        mine.some((t) => t.exp_alerts.length === 0),
        `${r.alert} is silent somewhere`,
      ).toBe(true);
    }
  });

  it('name only metrics the server exports', async () => {
    const exported = new Set((await createMetrics().registry.getMetricsAsJSON()).map((m) => m.name));
    for (const r of rules) {
      // Identifiers followed by `{`, `[`, `)` or a space that are not PromQL's own words.
      const names = [...r.expr.matchAll(/\b([a-z_][a-z0-9_]*)(?=\s*[{[)]|\s*(?:[-+*/<>=]|and|or|$))/g)].map(
        (m) => m[1]!,
      );
      const metrics = names.filter((n) => /^leoflow_/.test(n));
      expect(metrics.length, `${r.alert} names a metric`).toBeGreaterThan(0);
      // A metric name without the prefix is one the server no longer exports under that name.
      const unprefixed = names.filter(
        (n) =>
          /_(total|seconds|depth|capacity|connected|waiting)(_count|_bucket|_sum)?$|^leader$|^runs$/.test(n) &&
          !n.startsWith('leoflow_'),
      );
      expect(unprefixed, r.alert).toEqual([]);
      for (const n of metrics)
        expect(exported.has(n.replace(/_(count|bucket|sum)$/, '')), `${r.alert}: ${n}`).toBe(true);
    }
  });
});
