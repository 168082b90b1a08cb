import type { Route } from './api-route.js';
import type { Cluster } from './cluster.js';
import { stripKind } from './list-objects.js';
import { methodNotAllowed, notFound } from './status.js';

/** The fake nodes as Node objects (a lost one NotReady and tainted), for get and list. */
export function serveNodes(c: Cluster, route: Route): [number, unknown] {
  const nodes = (c.scheduler?.nodes ?? []).map((n) => ({
    kind: 'Node',
    apiVersion: 'v1',
    metadata: { name: n.name, labels: n.labels, resourceVersion: String(c.store.resourceVersion) },
    spec: n.lost ? { taints: [{ key: 'node.kubernetes.io/unreachable', effect: 'NoExecute' }] } : {},
    status: {
      capacity: { cpu: n.cpu, memory: n.memory, pods: String(n.pods) },
      allocatable: { cpu: n.cpu, memory: n.memory, pods: String(n.pods) },
      conditions: [
        { type: 'Ready', status: n.lost ? 'Unknown' : 'True', reason: n.lost ? 'NodeStatusUnknown' : 'KubeletReady' },
      ],
    },
  }));
  if (route.verb === 'get') {
    const n = nodes.find((x) => x.metadata.name === route.name);
    if (!n) throw notFound('nodes', route.name!);
    return [200, n];
  }
  if (route.verb === 'list')
    return [
      200,
      {
        kind: 'NodeList',
        apiVersion: 'v1',
        metadata: { resourceVersion: String(c.store.resourceVersion) },
        items: nodes.map(stripKind),
      },
    ];
  throw methodNotAllowed();
}
