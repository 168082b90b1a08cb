import pino, { type Logger } from 'pino';
import pretty from 'pino-pretty';

/**
 * pino JSON logs for machines (one object per line, with runId/tiId/dagId fields), or the same
 * records rendered for a human at a terminal.
 */
export function createLogger(opts: { level: string; format: 'json' | 'pretty'; replicaId?: string }): Logger {
  const base = opts.replicaId ? { replica: opts.replicaId } : {};
  if (opts.format === 'pretty') {
    return pino(
      { level: opts.level, base },
      pretty({ colorize: process.stdout.isTTY, sync: true, translateTime: 'HH:MM:ss.l', ignore: 'pid,hostname,replica' }),
    );
  }
  return pino({ level: opts.level, base: { ...base, pid: process.pid } });
}
