import { describe, expect, it } from 'vitest';
import { isConnectionError } from '../../src/db/is-connection-error.js';

describe('isConnectionError', () => {
  it('knows connection failures by code', () => {
    for (const code of [
      '08006',
      '08001',
      '57P01',
      '57P03',
      '53300',
      'ECONNREFUSED',
      'CONNECTION_ENDED',
      'ECONNRESET',
    ]) {
      expect(isConnectionError(Object.assign(new Error('x'), { code })), code).toBe(true);
    }
  });
  it('looks through causes', () => {
    expect(isConnectionError(new Error('wrapped', { cause: Object.assign(new Error('x'), { code: '57P01' }) }))).toBe(
      true,
    );
  });
  it('does not mistake other errors for an outage', () => {
    for (const code of ['42P01', '42703', '23505', '40001', undefined]) {
      expect(
        isConnectionError(Object.assign(new Error('connection refused, says the message'), { code })),
        String(code),
      ).toBe(false);
    }
    expect(isConnectionError(null)).toBe(false);
  });
});
