import { createHash } from 'node:crypto';

/**
 * What a log line or an error shows of a credential (an attempt token, an agent process's
 * incarnation id): enough to tell two apart and to match one the operator holds, never the value.
 */
export function fingerprint(secret: string): string {
  return `sha256:${createHash('sha256').update(secret).digest('hex').slice(0, 12)}`;
}
