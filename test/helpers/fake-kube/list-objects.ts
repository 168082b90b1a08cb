import { parseFieldSelector } from './field-selector.js';
import { parseLabelSelector } from './label-selector.js';
import type { KubeObject, ObjectStore, Resource } from './object-store.js';
import { badRequest, expired, tooLargeResourceVersion } from './status.js';

/** A list with selectors, paged by `limit`/`continue` (a continue token from before a compaction is 410 Expired). */
export function listObjects(store: ObjectStore, resource: Resource, namespace: string | undefined, url: URL): unknown {
  const labels = parseLabelSelector(url.searchParams.get('labelSelector'));
  const fields = parseFieldSelector(resource, url.searchParams.get('fieldSelector'));
  let items = store.list(resource, namespace, (o) => labels(o.metadata.labels) && fields(o));
  let listRv = store.resourceVersion;
  const rvParam = url.searchParams.get('resourceVersion');
  const match = url.searchParams.get('resourceVersionMatch');
  if (rvParam && rvParam !== '0' && match === 'Exact' && Number(rvParam) !== listRv) {
    if (Number(rvParam) < store.compactedResourceVersion)
      throw expired(`too old resource version: ${rvParam} (${store.compactedResourceVersion})`);
    throw badRequest(`the fake serves resourceVersionMatch=Exact only for the current resourceVersion ${listRv}`);
  }
  const cont = url.searchParams.get('continue');
  if (cont) {
    let token: { rv: number; start: string };
    try {
      token = JSON.parse(Buffer.from(cont, 'base64').toString()) as { rv: number; start: string };
    } catch {
      throw badRequest('continue key is not valid: illegal base64 data');
    }
    if (token.rv < store.compactedResourceVersion) {
      throw expired(
        'The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.',
      );
    }
    listRv = token.rv;
    items = items.filter((o) => `${o.metadata.namespace}/${o.metadata.name}` > token.start);
  }
  const metadata: Record<string, unknown> = { resourceVersion: String(listRv) };
  const limit = Number(url.searchParams.get('limit') ?? 0);
  if (limit > 0 && items.length > limit) {
    const last = items[limit - 1]!;
    metadata.continue = Buffer.from(
      JSON.stringify({ rv: listRv, start: `${last.metadata.namespace}/${last.metadata.name}` }),
    ).toString('base64');
    metadata.remainingItemCount = items.length - limit;
    items = items.slice(0, limit);
  }
  return {
    kind: resource === 'pods' ? 'PodList' : 'EventList',
    apiVersion: 'v1',
    metadata,
    items: items.map(stripKind),
  };
}

/** Items of a list carry no kind or apiVersion: the list does. */
export function stripKind(o: KubeObject): KubeObject {
  const { kind: _k, apiVersion: _a, ...rest } = o;
  return rest as KubeObject;
}

/**
 * A list at `resourceVersion=N` (NotOlderThan) must be at least that fresh: the server waits up
 * to 3 s for a version it has not reached, then answers 504 Timeout (the watch cache's rule).
 */
export async function waitForListVersion(store: ObjectStore, url: URL): Promise<void> {
  const rv = url.searchParams.get('resourceVersion');
  if (!rv || rv === '0' || !/^\d+$/.test(rv) || url.searchParams.get('resourceVersionMatch') === 'Exact') return;
  const deadline = Date.now() + 3000;
  while (store.resourceVersion < Number(rv)) {
    if (Date.now() > deadline) throw tooLargeResourceVersion(Number(rv), store.resourceVersion);
    await new Promise((r) => setTimeout(r, 25));
  }
}
