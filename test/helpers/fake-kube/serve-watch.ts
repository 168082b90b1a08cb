import type { ServerResponse } from 'node:http';
import type { Route } from './api-route.js';
import { parseFieldSelector } from './field-selector.js';
import { parseLabelSelector } from './label-selector.js';
import type { ObjectStore, Resource } from './object-store.js';
import { methodNotAllowed } from './status.js';
import { WatchStream } from './watch-stream.js';

/** A watch request on pods or events: its selectors and options parsed, the stream opened and kept in `watches`. */
export async function serveWatch(
  store: ObjectStore,
  watches: Set<WatchStream>,
  timing: { bookmarkIntervalMs: number; lagMs: number },
  route: Route,
  url: URL,
  res: ServerResponse,
  record: (s: number) => void,
): Promise<void> {
  const resource = route.resource as Resource;
  if (resource !== 'pods' && resource !== 'events') throw methodNotAllowed();
  const p = url.searchParams;
  let fieldSelector = p.get('fieldSelector') ?? undefined;
  if (route.name !== undefined)
    fieldSelector = [fieldSelector, `metadata.name=${route.name}`].filter(Boolean).join(',');
  const timeout = p.get('timeoutSeconds');
  const req: ConstructorParameters<typeof WatchStream>[1] = {
    resource,
    labels: parseLabelSelector(p.get('labelSelector')),
    fields: parseFieldSelector(resource, fieldSelector),
    resourceVersion: p.get('resourceVersion') ?? '',
    allowBookmarks: ['1', 'true'].includes(p.get('allowWatchBookmarks') ?? ''),
    sendInitialEvents: p.get('sendInitialEvents') === 'true',
    bookmarkIntervalMs: timing.bookmarkIntervalMs,
    lagMs: timing.lagMs,
  };
  if (route.namespace !== undefined) req.namespace = route.namespace;
  if (timeout !== null) req.timeoutSeconds = Number(timeout);
  const ls = p.get('labelSelector');
  if (ls) req.labelSelector = ls;
  if (fieldSelector) req.fieldSelector = fieldSelector;
  const w = new WatchStream(store, req, res, (x) => watches.delete(x));
  watches.add(w);
  try {
    await w.start();
    record(200);
  } catch (err) {
    watches.delete(w);
    throw err;
  }
}
