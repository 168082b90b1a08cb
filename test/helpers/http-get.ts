import http from 'node:http';

/**
 * A GET (or HEAD) over HTTP/1.1 on a connection of its own, closed after the answer (fetch keeps
 * its connections pooled, which the leak check counts as left behind). `path` is sent as given.
 */
export function httpGet(
  url: string,
  opts: { method?: 'GET' | 'HEAD'; path?: string } = {},
): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: u.hostname,
        port: u.port,
        path: opts.path ?? u.pathname + u.search,
        method: opts.method ?? 'GET',
        agent: false,
      },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
        res.on('error', reject);
      },
    );
    req.setTimeout(10_000, () => req.destroy(new Error(`GET ${url}: no answer within 10 s`)));
    req.on('error', reject);
    req.end();
  });
}
