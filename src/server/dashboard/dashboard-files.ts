/**
 * The dashboard's static files (the Vite build in dist/ui), served on the API port for the GET and
 * HEAD requests that name no RPC, so every replica serves it and the browser calls the API on the
 * same origin (no CORS). Client routes (`/runs/12`) get index.html; hashed files under /assets/ may
 * be cached for a year, index.html never (a new build must reach the next load).
 */
import { createReadStream } from 'node:fs';
import { readFile, stat } from 'node:fs/promises';
import type http from 'node:http';
import type http2 from 'node:http2';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';

/** Where `npm run build` (and `npm ci`'s prepare) writes the dashboard; the same from src/ and dist/. */
export const DASHBOARD_DIR = fileURLToPath(new URL('../../../dist/ui/', import.meta.url));

const CONTENT_TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.json': 'application/json',
  '.txt': 'text/plain; charset=utf-8',
  '.woff2': 'font/woff2',
};

const MISSING_BUILD =
  'The dashboard is not built: dist/ui/index.html is missing. Run `npm run build` (npm ci builds it too), ' +
  'then reload. The API on this port works without it.\n';

type Req = http.IncomingMessage | http2.Http2ServerRequest;
type Res = http.ServerResponse | http2.Http2ServerResponse;

/**
 * A handler for requests the API does not route: the dashboard's files for GET and HEAD, 404 for
 * anything else. `dir` is the build's folder (DASHBOARD_DIR unless a test says otherwise).
 */
export function dashboardFiles(dir: string = DASHBOARD_DIR): (req: Req, res: Res) => void {
  const root = path.resolve(dir);
  return (req, res) => {
    const method = req.method ?? 'GET';
    if (method !== 'GET' && method !== 'HEAD') {
      res.writeHead(404);
      res.end();
      return;
    }
    void serve(root, req, res, method === 'HEAD').catch(() => {
      if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain; charset=utf-8' });
      res.end();
    });
  };
}

async function serve(root: string, req: Req, res: Res, head: boolean): Promise<void> {
  const pathname = requestPath(req.url ?? '/');
  if (pathname === null) return send(res, 400, 'text/plain; charset=utf-8', 'bad path\n', head);
  const file = path.resolve(root, '.' + pathname);
  // Resolved under the root or not at all: `..` and encoded slashes cannot leave it.
  const inside = file === root || file.startsWith(root + path.sep);
  const asset = pathname.startsWith('/assets/');
  const found = inside && pathname !== '/' ? await fileSize(file) : null;
  if (found !== null && asset && acceptsGzip(req) && COMPRESSED.has(path.extname(file)))
    return sendGzipped(res, file, head);
  if (found !== null) return stream(res, file, found, asset, head);
  // A missing hashed file is a 404, not the page: a stale tab asking for an old build's chunk.
  if (asset || path.extname(pathname) !== '') return send(res, 404, 'text/plain; charset=utf-8', 'not found\n', head);
  const index = path.join(root, 'index.html');
  const size = await fileSize(index);
  if (size === null) return send(res, 404, 'text/plain; charset=utf-8', MISSING_BUILD, head);
  return stream(res, index, size, false, head);
}

/** Text assets are sent gzipped to clients that take it: the bundle is a third of its size so. */
const COMPRESSED = new Set(['.js', '.css', '.svg']);
/** Each hashed asset gzipped once (its name changes with its content); a build holds a handful. */
const gzipped = new Map<string, Buffer>();
const GZIPPED_MAX = 64;

function acceptsGzip(req: Req): boolean {
  return /\bgzip\b/.test(String(req.headers['accept-encoding'] ?? ''));
}

async function sendGzipped(res: Res, file: string, head: boolean): Promise<void> {
  let body = gzipped.get(file);
  if (!body) {
    body = gzipSync(await readFile(file), { level: 9 });
    if (gzipped.size >= GZIPPED_MAX) gzipped.delete(gzipped.keys().next().value!);
    gzipped.set(file, body);
  }
  res.writeHead(200, {
    'content-type': CONTENT_TYPES[path.extname(file)] ?? 'application/octet-stream',
    'content-encoding': 'gzip',
    'content-length': String(body.length),
    'cache-control': 'public, max-age=31536000, immutable',
    vary: 'accept-encoding',
    'x-content-type-options': 'nosniff',
  });
  if (head) res.end();
  else res.end(body);
}

/** The URL's path, decoded; null when it does not decode or holds a NUL or a backslash. */
function requestPath(url: string): string | null {
  const raw = url.split(/[?#]/, 1)[0] ?? '/';
  let decoded: string;
  try {
    decoded = decodeURIComponent(raw);
  } catch {
    return null;
  }
  if (!decoded.startsWith('/') || decoded.includes('\0') || decoded.includes('\\')) return null;
  return decoded;
}

async function fileSize(file: string): Promise<number | null> {
  try {
    const s = await stat(file);
    return s.isFile() ? s.size : null;
  } catch {
    return null;
  }
}

function stream(res: Res, file: string, size: number, immutable: boolean, head: boolean): void {
  res.writeHead(200, {
    'content-type': CONTENT_TYPES[path.extname(file)] ?? 'application/octet-stream',
    'content-length': String(size),
    'cache-control': immutable ? 'public, max-age=31536000, immutable' : 'no-cache',
    'x-content-type-options': 'nosniff',
  });
  if (head) {
    res.end();
    return;
  }
  const body = createReadStream(file);
  body.on('error', () => res.end());
  body.pipe(res as NodeJS.WritableStream);
}

function send(res: Res, status: number, type: string, text: string, head: boolean): void {
  res.writeHead(status, { 'content-type': type, 'content-length': String(Buffer.byteLength(text)) });
  if (head) res.end();
  else res.end(text);
}
