import { badRequest } from './status.js';

/**
 * Field selectors (`a=b`, `a==b`, `a!=b`, comma-separated) over the fields the real server
 * indexes for each resource; any other field is refused as the server does.
 */
export type FieldSelector = (obj: unknown) => boolean;

const FIELDS: Record<string, Record<string, (o: any) => string>> = {
  pods: {
    'metadata.name': (o) => o.metadata?.name ?? '',
    'metadata.namespace': (o) => o.metadata?.namespace ?? '',
    'spec.nodeName': (o) => o.spec?.nodeName ?? '',
    'spec.restartPolicy': (o) => o.spec?.restartPolicy ?? '',
    'spec.schedulerName': (o) => o.spec?.schedulerName ?? '',
    'spec.serviceAccountName': (o) => o.spec?.serviceAccountName ?? '',
    'spec.hostNetwork': (o) => String(o.spec?.hostNetwork ?? false),
    'status.phase': (o) => o.status?.phase ?? '',
    'status.podIP': (o) => o.status?.podIP ?? '',
    'status.nominatedNodeName': (o) => o.status?.nominatedNodeName ?? '',
  },
  events: {
    'metadata.name': (o) => o.metadata?.name ?? '',
    'metadata.namespace': (o) => o.metadata?.namespace ?? '',
    'involvedObject.kind': (o) => o.involvedObject?.kind ?? '',
    'involvedObject.namespace': (o) => o.involvedObject?.namespace ?? '',
    'involvedObject.name': (o) => o.involvedObject?.name ?? '',
    'involvedObject.uid': (o) => o.involvedObject?.uid ?? '',
    'involvedObject.apiVersion': (o) => o.involvedObject?.apiVersion ?? '',
    'involvedObject.resourceVersion': (o) => o.involvedObject?.resourceVersion ?? '',
    'involvedObject.fieldPath': (o) => o.involvedObject?.fieldPath ?? '',
    reason: (o) => o.reason ?? '',
    reportingComponent: (o) => o.reportingComponent ?? '',
    source: (o) => o.source?.component ?? '',
    type: (o) => o.type ?? '',
  },
};

export function parseFieldSelector(resource: string, text: string | null | undefined): FieldSelector {
  if (!text) return () => true;
  const fields = FIELDS[resource] ?? {};
  const reqs = text
    .split(',')
    .map((t) => t.trim())
    .filter((t) => t !== '')
    .map((term) => {
      const m = /^([^=!]+?)\s*(==|=|!=)\s*(.*)$/.exec(term);
      if (!m) throw badRequest(`invalid selector: '${text}'; can't understand '${term}'`);
      const get = fields[m[1]!];
      if (!get) throw badRequest(`field label not supported: ${m[1]}`);
      return { get, neq: m[2] === '!=', value: m[3]! };
    });
  return (obj) => reqs.every((r) => (r.get(obj) === r.value) !== r.neq);
}
