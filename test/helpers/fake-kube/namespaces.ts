import { randomUUID } from 'node:crypto';
import type { Route } from './api-route.js';
import { stripKind } from './list-objects.js';
import type { KubeObject, ObjectStore } from './object-store.js';
import { methodNotAllowed, notFound } from './status.js';
import { now } from './timestamp.js';

/** The namespaces that exist and the service accounts in them, served read-only as the API does. */
export class Namespaces {
  private readonly namespaces = new Map<string, KubeObject>();
  private readonly serviceAccounts = new Set<string>();

  constructor(private readonly store: ObjectStore) {}

  add(name: string): void {
    this.namespaces.set(name, {
      kind: 'Namespace',
      apiVersion: 'v1',
      metadata: {
        name,
        uid: randomUUID(),
        resourceVersion: String(this.store.resourceVersion),
        creationTimestamp: now(),
        labels: { 'kubernetes.io/metadata.name': name },
      },
      spec: { finalizers: ['kubernetes'] },
      status: { phase: 'Active' },
    });
    this.serviceAccounts.add(`${name}/default`);
  }

  addLabels(name: string, labels: Record<string, string>): void {
    const n = this.namespaces.get(name);
    if (!n) throw new Error(`no namespace ${name}`);
    n.metadata.labels = { ...n.metadata.labels, ...labels };
  }

  addServiceAccount(namespace: string, name: string): void {
    this.serviceAccounts.add(`${namespace}/${name}`);
  }

  has(name: string): boolean {
    return this.namespaces.has(name);
  }

  labels(name: string): Record<string, string> | undefined {
    return this.namespaces.get(name)?.metadata.labels;
  }

  hasServiceAccount(namespace: string, name: string): boolean {
    return this.serviceAccounts.has(`${namespace}/${name}`);
  }

  serve(route: Route): [number, unknown] {
    if (route.verb === 'get') {
      const ns = this.namespaces.get(route.name!);
      if (!ns) throw notFound('namespaces', route.name!);
      return [200, ns];
    }
    if (route.verb === 'list') {
      return [
        200,
        {
          kind: 'NamespaceList',
          apiVersion: 'v1',
          metadata: { resourceVersion: String(this.store.resourceVersion) },
          items: [...this.namespaces.values()].map(stripKind),
        },
      ];
    }
    throw methodNotAllowed();
  }
}
