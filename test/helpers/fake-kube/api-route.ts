import { methodNotAllowed, statusFor, type StatusError } from './status.js';

/**
 * Which verb, resource, namespace and name a request is about, read from its method and path as
 * the API server's request-info resolver does (`/api/v1/namespaces/{ns}/{resource}/{name}/{sub}`,
 * the cluster-wide `/api/v1/{resource}`, the deprecated `/api/v1/watch/…`, `?watch=1`).
 */
export type Verb = 'get' | 'list' | 'watch' | 'create' | 'delete' | 'deletecollection' | 'update' | 'patch';

export interface Route {
  verb: Verb | 'discovery';
  resource?: string;
  subresource?: string;
  namespace?: string;
  name?: string;
  discovery?: string;
}

export function parseRoute(method: string, url: URL): Route {
  const parts = url.pathname
    .split('/')
    .filter((p) => p !== '')
    .map(decodeURIComponent);
  const path = parts.join('/');
  if (['version', 'healthz', 'readyz', 'livez'].includes(path)) return { verb: 'discovery', discovery: 'public' };
  if (path === 'api' || path === 'apis' || path === 'api/v1') return { verb: 'discovery', discovery: path };
  if (parts[0] !== 'api' || parts[1] !== 'v1') throw notFoundPath();
  let rest = parts.slice(2);
  let watch = ['1', 'true'].includes(url.searchParams.get('watch') ?? '');
  if (rest[0] === 'watch') {
    watch = true;
    rest = rest.slice(1);
  }
  const r: Route = { verb: 'get' };
  if (rest[0] === 'namespaces' && rest.length >= 3) {
    r.namespace = rest[1]!;
    r.resource = rest[2]!;
    if (rest[3] !== undefined) r.name = rest[3];
    if (rest[4] !== undefined) r.subresource = rest[4];
    if (rest.length > 5) throw notFoundPath();
  } else if (rest.length >= 1 && rest.length <= 2) {
    r.resource = rest[0]!;
    if (rest[1] !== undefined) r.name = rest[1];
  } else throw notFoundPath();
  if (!['pods', 'events', 'namespaces', 'nodes'].includes(r.resource!)) throw notFoundPath();
  if (r.subresource !== undefined && !(r.resource === 'pods' && r.subresource === 'log')) throw notFoundPath();
  switch (method) {
    case 'GET':
      r.verb = watch ? 'watch' : r.name !== undefined ? 'get' : 'list';
      break;
    case 'POST':
      r.verb = 'create';
      break;
    case 'DELETE':
      r.verb = r.name !== undefined ? 'delete' : 'deletecollection';
      break;
    case 'PUT':
      r.verb = 'update';
      break;
    case 'PATCH':
      r.verb = 'patch';
      break;
    default:
      throw methodNotAllowed();
  }
  return r;
}

export function notFoundPath(): StatusError {
  return statusFor(
    404,
    'the server could not find the requested resource',
    { causes: [{ reason: 'UnexpectedServerResponse', message: '404 page not found' }] },
    'NotFound',
  );
}
