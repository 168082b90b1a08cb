import type { Route } from './api-route.js';
import type { Cluster } from './cluster.js';
import { badRequest, notFound } from './status.js';

/** GET pods/log: a container's output as the kubelet serves it, with tailLines and limitBytes. */
export function servePodLog(c: Cluster, route: Route, url: URL): [number, unknown] {
  const pod = c.store.get('pods', route.namespace!, route.name!);
  if (!pod) throw notFound('pods', route.name!);
  const container = url.searchParams.get('container') ?? undefined;
  const names = pod.spec.containers.map((c: any) => c.name);
  if (container === undefined && names.length > 1) {
    throw badRequest(`a container name must be specified for pod ${route.name}, choose one of: [${names.join(' ')}]`);
  }
  const name = container ?? names[0];
  if (!names.includes(name)) throw badRequest(`container ${name} is not valid for pod ${route.name}`);
  const text = c.kubelet.logs(route.namespace!, route.name!, name);
  if (text === undefined) {
    const waiting =
      pod.status?.containerStatuses?.find((c: any) => c.name === name)?.state?.waiting?.reason ?? 'ContainerCreating';
    throw badRequest(`container "${name}" in pod "${route.name}" is waiting to start: ${waiting}`);
  }
  // The kubelet's order: the last tailLines lines, then at most limitBytes of them (a cut line
  // included, as the API reference warns).
  const tail = url.searchParams.get('tailLines');
  const lines =
    tail !== null
      ? text
          .split('\n')
          .slice(-(Number(tail) + 1))
          .join('\n')
      : text;
  const limit = url.searchParams.get('limitBytes');
  if (limit !== null && !(Number.isInteger(Number(limit)) && Number(limit) > 0))
    throw badRequest(`limitBytes: Invalid value: ${limit}: must be greater than 0`);
  return [200, limit !== null ? Buffer.from(lines).subarray(0, Number(limit)).toString() : lines];
}
