import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { listenOn } from '../listen-error.js';
import { healthText, type Health } from './health.js';
import type { Metrics } from './metrics.js';

/**
 * Serves `/metrics`, and with `health` the probes: `/healthz` (liveness) and `/readyz`
 * (readiness), 200 when every check passes, 503 with a short body naming what failed.
 */
export async function serveMetrics(
  m: Metrics,
  host: string,
  port: number,
  health?: Health,
): Promise<{ address: AddressInfo; close(): Promise<void> }> {
  const server = http.createServer((req, res) => {
    const probe =
      req.method === 'GET' && health
        ? ({ '/healthz': 'live', '/readyz': 'ready' } as const)[req.url?.split('?')[0] ?? '']
        : undefined;
    if (probe && health) {
      (probe === 'live' ? health.live() : health.ready()).then(
        (r) => {
          res.writeHead(r.ok ? 200 : 503, { 'content-type': 'text/plain; charset=utf-8', 'cache-control': 'no-store' });
          res.end(healthText(probe, r));
        },
        (err: Error) => {
          res.writeHead(503, { 'content-type': 'text/plain; charset=utf-8' });
          res.end(`not ${probe}: the check failed: ${err.message}\n`);
        },
      );
      return;
    }
    if (req.method === 'GET' && (req.url === '/metrics' || req.url?.startsWith('/metrics?'))) {
      m.registry.metrics().then(
        (text) => {
          res.writeHead(200, { 'content-type': m.registry.contentType });
          res.end(text);
        },
        (err: Error) => {
          res.writeHead(500, { 'content-type': 'text/plain' });
          res.end(`metrics failed: ${err.message}\n`);
        },
      );
      return;
    }
    res.writeHead(404, { 'content-type': 'text/plain' });
    res.end(
      health ? 'not found: this port serves /metrics, /healthz and /readyz\n' : 'not found: metrics are at /metrics\n',
    );
  });
  await listenOn(server, '--metrics-listen', host, port, '(or off)');
  return {
    address: server.address() as AddressInfo,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
