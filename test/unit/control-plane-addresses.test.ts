import { describe, expect, it } from 'vitest';
import { ControlPlaneAddresses } from '../../src/agent/control-plane-addresses.js';

describe('ControlPlaneAddresses', () => {
  it('goes round the given addresses in turn', () => {
    const a = new ControlPlaneAddresses(['http://a:7070', 'http://b:7070']);
    expect(a.current()).toBe('http://a:7070');
    a.advance();
    expect(a.current()).toBe('http://b:7070');
    a.advance();
    expect(a.current()).toBe('http://a:7070');
  });

  it('learns the replicas a Welcome lists, keeps the given ones, and forgets what a later Welcome leaves out', () => {
    const a = new ControlPlaneAddresses(['http://a:7070/']);
    a.learn(['http://a:7070', 'http://b:7070', 'http://c:7070']);
    expect(a.all()).toEqual(['http://a:7070/', 'http://b:7070', 'http://c:7070']);
    expect(a.current()).toBe('http://a:7070/');
    a.learn(['http://c:7070']);
    expect(a.all()).toEqual(['http://a:7070/', 'http://c:7070']);
  });

  it('goes where a Reconnect says, never back to the address it left, even one it was given', () => {
    const a = new ControlPlaneAddresses(['http://a:7070']);
    expect(a.goTo(['http://a:7070', 'http://n:7070'])).toBe(true);
    expect(a.current()).toBe('http://n:7070');
    const two = new ControlPlaneAddresses(['http://a:7070', 'http://x:7070', 'http://b:7070']);
    expect(two.goTo(['http://b:7070'])).toBe(true);
    expect(two.current()).toBe('http://b:7070');
  });

  it('without a usable place to go, moves nothing (the runtime takes the next address in turn)', () => {
    const a = new ControlPlaneAddresses(['http://a:7070', 'http://b:7070']);
    expect(a.goTo([])).toBe(false);
    expect(a.current()).toBe('http://a:7070');
    expect(a.goTo(['not a url', 'ftp://c:21', 'http://a:7070'])).toBe(false);
    expect(a.current()).toBe('http://a:7070');
  });

  it('never learns an address of a scheme it was not given (TLS stays TLS)', () => {
    const a = new ControlPlaneAddresses(['https://a:7070']);
    a.learn(['http://b:7070', 'https://c:7070']);
    expect(a.all()).toEqual(['https://a:7070', 'https://c:7070']);
    expect(a.goTo(['http://b:7070'])).toBe(false);
  });
});
