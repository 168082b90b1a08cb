/** Reads a Prometheus text page into `name{labels}` → value (labels as printed). */
export async function scrapeMetrics(url: string): Promise<Map<string, number>> {
  const res = await fetch(url);
  if (!res.ok) throw new Error(`GET ${url}: ${res.status}`);
  const out = new Map<string, number>();
  for (const line of (await res.text()).split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    out.set(line.slice(0, i), Number(line.slice(i + 1)));
  }
  return out;
}

/** Sum of every series of a metric, whatever its labels. */
export function metricSum(metrics: Map<string, number>, name: string): number {
  let sum = 0;
  for (const [k, v] of metrics) if (k === name || k.startsWith(`${name}{`)) sum += v;
  return sum;
}

/** One series of /metrics, named as printed (`name{labels}`), or null when the page has none. */
export async function metricSeries(url: string, series: string): Promise<number | null> {
  return (await scrapeMetrics(url)).get(series) ?? null;
}
