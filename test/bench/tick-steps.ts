import { scrapeMetrics } from '../helpers/scrape-metrics.js';

/**
 * The scheduler's steps as a server's `leoflow_tick_duration_seconds` histogram counts them: read
 * before and after a window, the window's percentiles (each its bucket's upper bound).
 */
const BUCKET = /^leoflow_tick_duration_seconds_bucket\{le="([^"]+)"\}$/;

export interface Steps {
  count: number;
  sum: number;
  buckets: [number, number][];
}

export async function steps(s: { metricsUrl: string }): Promise<Steps> {
  const m = await scrapeMetrics(s.metricsUrl);
  const buckets: [number, number][] = [];
  for (const [k, v] of m) {
    const b = BUCKET.exec(k);
    if (b) buckets.push([b[1] === '+Inf' ? Infinity : Number(b[1]), v]);
  }
  return {
    count: m.get('leoflow_tick_duration_seconds_count') ?? 0,
    sum: m.get('leoflow_tick_duration_seconds_sum') ?? 0,
    buckets: buckets.sort((a, b) => a[0] - b[0]),
  };
}

/** The upper bound, in ms, of the bucket the p-th percentile of the window's steps falls in. */
export function bucketPercentile(before: Steps, after: Steps, p: number): number {
  const n = after.count - before.count;
  for (const [le, v] of after.buckets) {
    const inWindow = v - (before.buckets.find(([l]) => l === le)?.[1] ?? 0);
    if (inWindow >= (p / 100) * n) return le * 1000;
  }
  return Infinity;
}
