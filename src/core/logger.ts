import pino, { type Logger } from 'pino';
import pretty from 'pino-pretty';

/** The levels and formats `--log-level` and `--log-format` take, for the server and the agent alike. */
export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const;
export const LOG_FORMATS = ['json', 'pretty'] as const;

/**
 * pino JSON logs for machines (one object per line, with runId/tiId/dagId fields), or the same
 * records rendered for a human at a terminal.
 */
export function createLogger(opts: {
  level: string;
  format: (typeof LOG_FORMATS)[number];
  replicaId?: string;
}): Logger {
  const base = opts.replicaId ? { replica: opts.replicaId } : {};
  if (opts.format === 'pretty') {
    return pino(
      { level: opts.level, base },
      pretty({
        colorize: process.stdout.isTTY,
        sync: true,
        translateTime: 'HH:MM:ss.l',
        ignore: 'pid,hostname,replica',
      }),
    );
  }
  return pino({ level: opts.level, base: { ...base, pid: process.pid } });
}
