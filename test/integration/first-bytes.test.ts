import http from 'node:http';
import http2 from 'node:http2';
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { routeByFirstBytes } from '../../src/server/first-bytes.js';

/**
 * The plain API port's choice between HTTP/2 and HTTP/1.1, on what real clients send: the preface
 * may arrive in pieces, and a connection may reset before it says anything.
 */

const open: { close(): void }[] = [];
afterEach(() => {
  for (const o of open.splice(0)) o.close();
});

async function port(): Promise<{ port: number; served: string[]; sessions(): number }> {
  const served: string[] = [];
  const answer = (req: http.IncomingMessage | http2.Http2ServerRequest, res: http.ServerResponse) => {
    served.push(`${req.httpVersion} ${req.url}`);
    res.end('ok');
  };
  const h2 = http2.createServer(answer as never);
  const h1 = http.createServer(answer);
  let sessions = 0;
  h2.on('session', () => sessions++);
  const front = net.createServer((s) => routeByFirstBytes(s, h2, h1));
  await new Promise<void>((r) => front.listen(0, '127.0.0.1', r));
  open.push({ close: () => front.close() });
  return { port: (front.address() as net.AddressInfo).port, served, sessions: () => sessions };
}

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Writes `parts` one at a time, a pause between, and resolves what the server sent back. */
async function sendInPieces(p: number, parts: (string | Buffer)[]): Promise<string> {
  const s = net.connect(p, '127.0.0.1');
  open.push({ close: () => s.destroy() });
  await new Promise((r) => s.once('connect', r));
  let got = '';
  s.on('data', (b: Buffer) => (got += b.toString('latin1')));
  for (const part of parts) {
    s.write(part);
    await pause(30);
  }
  await pause(100);
  return got;
}

describe('routeByFirstBytes', () => {
  it('gives a connection whose preface arrives in pieces to HTTP/2, which answers with its SETTINGS', async () => {
    const { port: p, sessions } = await port();
    // The preface split after two bytes, then an empty SETTINGS frame (RFC 9113 §6.5).
    const settings = Buffer.from([0, 0, 0, 4, 0, 0, 0, 0, 0]);
    const got = await sendInPieces(p, ['PR', Buffer.concat([Buffer.from('I * HTTP/2.0\r\n\r\nSM\r\n\r\n'), settings])]);
    expect(got.charCodeAt(3)).toBe(4); // a frame of type SETTINGS
    expect(sessions()).toBe(1);
  });

  it('serves a real HTTP/2 client', async () => {
    const { port: p, served } = await port();
    const client = http2.connect(`http://127.0.0.1:${p}`);
    open.push({ close: () => client.close() });
    const req = client.request({ ':path': '/two' });
    req.end();
    let body = '';
    req.on('data', (d: Buffer) => (body += d.toString()));
    await new Promise((r) => req.on('end', r));
    expect(body).toBe('ok');
    expect(served).toEqual(['2.0 /two']);
  });

  it('gives anything else to HTTP/1.1, even a request split after its first byte', async () => {
    const { port: p, served } = await port();
    const got = await sendInPieces(p, ['G', 'ET /one HTTP/1.1\r\nhost: x\r\n\r\n']);
    expect(got).toMatch(/^HTTP\/1\.1 200 OK/);
    expect(served).toEqual(['1.1 /one']);
  });

  it('takes a P that is not the preface for HTTP/1.1 (PUT), and survives a connection reset before any byte', async () => {
    const { port: p, served } = await port();
    const early = net.connect(p, '127.0.0.1');
    await new Promise((r) => early.once('connect', r));
    early.resetAndDestroy();
    const got = await sendInPieces(p, ['P', 'UT /put HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n']);
    expect(got).toMatch(/^HTTP\/1\.1 200 OK/);
    expect(served).toEqual(['1.1 /put']);
  });
});
