import type { Logger } from 'pino';
import type { Config } from './config/config.js';

/** Logs the line that says a replica is ready: where it listens, how, and how long its start took. */
export function logReady(
  logger: Logger,
  config: Config,
  api: { host: string; port: number },
  metrics: { address: string; port: number } | null,
  startupMs: number,
): void {
  const { host, port } = api;
  logger.info(
    {
      listen: `${host}:${port}`,
      tls: config.tls ? (config.tls.clientCa ? `mtls-${config.tls.clientAuth}` : 'on') : 'off',
      metrics: metrics ? `${metrics.address}:${metrics.port}` : 'off',
      tracing: config.otlpEndpoint ?? 'off',
      edition: config.edition,
      role: config.role,
      replicaId: config.replicaId,
      startupMs: Math.round(startupMs),
    },
    `Leoflow ${config.edition} ready on ${config.tls ? 'https' : 'http'}://${host}:${port} (role ${config.role})`,
  );
}
