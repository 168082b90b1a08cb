/**
 * A label whose values are kept to a bounded set, so a metric labelled by DAG cannot grow a series
 * for every DAG ever applied: the first `max` distinct values seen are kept as they are, any later
 * one is reported as `other`. A Prometheus series costs memory in every scraper for as long as it
 * is retained; a few hundred DAGs is a dashboard, ten thousand is an outage of the monitoring.
 */
export function boundedLabel(max: number, other = 'other'): (value: string) => string {
  const kept = new Set<string>();
  return (value) => {
    if (kept.has(value)) return value;
    if (kept.size >= max) return other;
    kept.add(value);
    return value;
  };
}
