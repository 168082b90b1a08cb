import os from 'node:os';
import { describe, expect, it } from 'vitest';
import { advertisedUrl } from '../../src/server/advertised-url.js';

describe('advertisedUrl', () => {
  it('is --advertise-url when given', () => {
    expect(
      advertisedUrl({ configured: 'http://leoflow-0.leoflow:7070', host: '0.0.0.0', port: 7070, tls: false }),
    ).toBe('http://leoflow-0.leoflow:7070');
  });

  it('is the address listened on, with the scheme TLS gives', () => {
    expect(advertisedUrl({ configured: null, host: '127.0.0.1', port: 7171, tls: false })).toBe(
      'http://127.0.0.1:7171',
    );
    expect(advertisedUrl({ configured: null, host: '::1', port: 7171, tls: true })).toBe('https://[::1]:7171');
  });

  it('for a wildcard, is an address others can dial: never 0.0.0.0', () => {
    const url = advertisedUrl({ configured: null, host: '0.0.0.0', port: 7070, tls: false });
    expect(url).not.toContain('0.0.0.0');
    const external = Object.values(os.networkInterfaces())
      .flat()
      .find((a) => a && a.family === 'IPv4' && !a.internal);
    expect(url).toBe(`http://${external ? external.address : os.hostname()}:7070`);
  });
});
