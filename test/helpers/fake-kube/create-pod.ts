import { randomBytes } from 'node:crypto';
import type { Cluster } from './cluster.js';
import { defaultPod } from './default-pod.js';
import { isTerminal } from './fake-scheduler.js';
import type { Namespaces } from './namespaces.js';
import type { KubeObject } from './object-store.js';
import { podSecurityDenial } from './pod-security.js';
import type { PostedPods } from './posted-pods.js';
import { checkQuotas, type Quota } from './resource-quota.js';
import { alreadyExists, badRequest, forbidden, invalidObject, notFound } from './status.js';
import { validatePod } from './validate-pod.js';

/** What a pod create is checked against (the admission chain's inputs), and where it is counted. */
export interface PodAdmission {
  namespaces: Namespaces;
  quotas: Map<string, Quota[]>;
  posted: PostedPods;
}

/**
 * POST of a pod, through the API server's checks in its order: decoding, namespace, service
 * account, validation, defaults, Pod Security, ResourceQuota, a duplicate name; then stored and
 * queued for the scheduler (dryRun=All stops before storing).
 */
export function createPod(
  c: Cluster,
  admission: PodAdmission,
  namespace: string | undefined,
  body: string,
  url: URL,
): KubeObject {
  let input: any;
  try {
    input = JSON.parse(body);
  } catch (err) {
    throw badRequest(`couldn't get version/kind; json parse error: ${(err as Error).message}`);
  }
  if (typeof input !== 'object' || input === null || Array.isArray(input))
    throw badRequest(
      'the body of the request was in an unknown format - accepted media types include: ' +
        'application/json, application/yaml, application/vnd.kubernetes.protobuf',
    );
  if (input.kind !== undefined && input.kind !== 'Pod')
    throw badRequest(`the API version in the data (${input.apiVersion}) does not match the expected API version (v1)`);
  const ns = namespace!;
  if (input.metadata?.namespace !== undefined && input.metadata.namespace !== '' && input.metadata.namespace !== ns) {
    throw badRequest('the namespace of the provided object does not match the namespace sent on the request');
  }
  input.metadata ??= {};
  if (!input.metadata.name && input.metadata.generateName)
    input.metadata.name = `${input.metadata.generateName}${randomBytes(3).toString('hex').slice(0, 5)}`;
  const name: string = input.metadata.name ?? '';
  if (name) {
    admission.posted.post(ns, name, input.metadata.labels);
  }
  if (!admission.namespaces.has(ns)) throw notFound('namespaces', ns);
  const sa = input.spec?.serviceAccountName ?? input.spec?.serviceAccount ?? 'default';
  if (typeof sa === 'string' && !admission.namespaces.hasServiceAccount(ns, sa)) {
    throw forbidden(
      'pods',
      name || undefined,
      `error looking up service account ${ns}/${sa}: serviceaccount "${sa}" not found`,
    );
  }
  const errors = validatePod(input);
  if (errors.length > 0) throw invalidObject('Pod', name, errors);
  const pod = defaultPod(input, ns);
  // Pod Security admission runs before ResourceQuota, as the API server's admission chain orders them.
  const security = podSecurityDenial(pod, admission.namespaces.labels(ns));
  if (security) throw forbidden('pods', name, security);
  const quotas = admission.quotas.get(ns) ?? [];
  const quotaError =
    quotas.length > 0
      ? checkQuotas(
          quotas,
          pod,
          c.store.scan('pods', ns, (p) => !isTerminal(p)),
        )
      : undefined;
  if (quotaError) throw forbidden('pods', name, quotaError);
  if (c.store.get('pods', ns, name)) throw alreadyExists('pods', name);
  if (url.searchParams.getAll('dryRun').includes('All')) return { ...pod, kind: 'Pod', apiVersion: 'v1' };
  const created = c.store.create('pods', pod);
  admission.posted.created(ns, name);
  c.scheduler?.enqueue(ns, name);
  return created;
}
