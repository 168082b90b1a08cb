import type { Route } from './api-route.js';
import type { KubeObject, ObjectStore } from './object-store.js';
import { StatusError, badRequest, invalidObject, notFound, statusFor, type FieldError } from './status.js';
import { validatePod } from './validate-pod.js';

/**
 * A pod changed by PATCH (JSON patch, merge patch, strategic merge patch) or PUT, checked as the
 * pod strategy checks an update: metadata.resourceVersion, when given, must be the stored one
 * (409 Conflict otherwise); name, namespace and uid are immutable; of the spec only container
 * images, activeDeadlineSeconds and added tolerations may change (422 otherwise); the status is
 * a subresource, so what the body says of it is ignored.
 */
export type PatchType = 'json' | 'merge' | 'strategic';

export function patchTypeOf(contentType: string | undefined): PatchType {
  const type = (contentType ?? '').split(';')[0]!.trim();
  switch (type) {
    case 'application/json-patch+json':
      return 'json';
    case 'application/merge-patch+json':
      return 'merge';
    case 'application/strategic-merge-patch+json':
      return 'strategic';
    default:
      throw statusFor(
        415,
        `the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json`,
        undefined,
        'UnsupportedMediaType',
      );
  }
}

/** RFC 7386; with `strategic`, lists of containers merge by name, as their patch strategy says. */
function mergePatch(target: any, patch: any, strategic: boolean, path: string): any {
  if (patch === null || typeof patch !== 'object' || Array.isArray(patch)) {
    if (
      strategic &&
      Array.isArray(patch) &&
      Array.isArray(target) &&
      (path === 'spec.containers' || path === 'spec.initContainers')
    ) {
      const out = target.map((c: any) => structuredClone(c));
      for (const p of patch) {
        const i = out.findIndex((c: any) => c.name === p?.name);
        if (i >= 0) out[i] = mergePatch(out[i], p, true, `${path}[]`);
        else out.push(p);
      }
      return out;
    }
    return structuredClone(patch);
  }
  const out = target !== null && typeof target === 'object' && !Array.isArray(target) ? { ...target } : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = mergePatch(out[k], v, strategic, path ? `${path}.${k}` : k);
  }
  return out;
}

function pointer(path: string): string[] {
  if (!path.startsWith('/'))
    throw badRequest(
      `the server rejected our request due to an error in our request: invalid JSON pointer ${JSON.stringify(path)}`,
    );
  return path
    .slice(1)
    .split('/')
    .map((t) => t.replace(/~1/g, '/').replace(/~0/g, '~'));
}

/** RFC 6902: add, remove, replace and test (what the API server's json-patch library is asked for in practice). */
function jsonPatch(target: any, ops: any): any {
  if (!Array.isArray(ops)) throw badRequest('json: cannot unmarshal object into Go value of type jsonpatch.Patch');
  const doc = structuredClone(target);
  for (const op of ops) {
    const keys = pointer(op.path);
    const last = keys.pop()!;
    let parent = doc;
    for (const k of keys) {
      parent = Array.isArray(parent) ? parent[Number(k)] : parent?.[k];
      if (parent === undefined)
        throw statusFor(
          422,
          `the server rejected our request due to an error in our request: doc is missing path: "${op.path}": missing value`,
          undefined,
          'Invalid',
        );
    }
    const has = Array.isArray(parent)
      ? Number(last) < parent.length
      : Object.prototype.hasOwnProperty.call(parent, last);
    switch (op.op) {
      case 'add':
        if (Array.isArray(parent)) parent.splice(last === '-' ? parent.length : Number(last), 0, op.value);
        else parent[last] = op.value;
        break;
      case 'replace':
      case 'remove':
        if (!has)
          throw statusFor(
            422,
            `the server rejected our request due to an error in our request: ${op.op} operation does not apply: doc is missing path: "${op.path}": missing value`,
            undefined,
            'Invalid',
          );
        if (op.op === 'replace') {
          if (Array.isArray(parent)) parent[Number(last)] = op.value;
          else parent[last] = op.value;
        } else if (Array.isArray(parent)) parent.splice(Number(last), 1);
        else delete parent[last];
        break;
      case 'test':
        if (JSON.stringify(parent[last]) !== JSON.stringify(op.value))
          throw statusFor(
            422,
            `the server rejected our request due to an error in our request: testing value ${op.path} failed: test failed`,
            undefined,
            'Invalid',
          );
        break;
      default:
        throw badRequest(`Unexpected kind: ${op.op}`);
    }
  }
  return doc;
}

export function applyPatch(pod: KubeObject, type: PatchType, body: string): KubeObject {
  let patch: any;
  try {
    patch = JSON.parse(body);
  } catch (err) {
    throw badRequest(`error decoding patch: ${(err as Error).message}`);
  }
  return type === 'json' ? jsonPatch(pod, patch) : mergePatch(pod, patch, type === 'strategic', '');
}

const SPEC_UPDATE_MESSAGE =
  'Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)';

/** The stored pod with the update applied, or the Status refusing it. */
export function checkPodUpdate(old: KubeObject, next: KubeObject): KubeObject {
  const name = old.metadata.name;
  const rv = next.metadata?.resourceVersion;
  if (rv !== undefined && rv !== '' && rv !== old.metadata.resourceVersion) {
    throw statusFor(
      409,
      `Operation cannot be fulfilled on pods "${name}": the object has been modified; please apply your changes to the latest version and try again`,
      { name, kind: 'pods' },
      'Conflict',
    );
  }
  const errs: FieldError[] = [];
  for (const f of ['name', 'namespace', 'uid'] as const) {
    if (next.metadata?.[f] !== undefined && next.metadata[f] !== old.metadata[f]) {
      errs.push({
        type: 'FieldValueInvalid',
        field: `metadata.${f}`,
        message: `Invalid value: ${JSON.stringify(next.metadata[f])}: field is immutable`,
      });
    }
  }
  const comparable = (spec: any) => {
    const s = structuredClone(spec ?? {});
    delete s.activeDeadlineSeconds;
    delete s.tolerations;
    for (const c of s.containers ?? []) delete c.image;
    return canonical(s);
  };
  const oldTolerations = canonical(old.spec?.tolerations ?? []);
  const keptTolerations = canonical((next.spec?.tolerations ?? []).slice(0, (old.spec?.tolerations ?? []).length));
  if (comparable(old.spec) !== comparable(next.spec) || oldTolerations !== keptTolerations) {
    errs.push({ type: 'FieldValueForbidden', field: 'spec', message: SPEC_UPDATE_MESSAGE });
  }
  errs.push(...validatePod(next).filter((e) => e.field.startsWith('metadata.') || e.field.includes('.image')));
  if (errs.length > 0) throw invalidObject('Pod', name, errs) as StatusError;
  const stored = structuredClone(next);
  stored.metadata = { ...old.metadata, labels: next.metadata?.labels, annotations: next.metadata?.annotations };
  if (stored.metadata.labels === undefined) delete stored.metadata.labels;
  if (stored.metadata.annotations === undefined) delete stored.metadata.annotations;
  stored.status = old.status;
  return stored;
}

/** JSON with every object's keys sorted, so equal values compare equal whatever order a client wrote them in. */
function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (v !== null && typeof v === 'object') {
    return `{${Object.keys(v)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical((v as Record<string, unknown>)[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(v) ?? 'null';
}

/** PATCH or PUT of a pod: its metadata, container images, deadline and added tolerations may change. */
export function updatePodRequest(
  store: ObjectStore,
  route: Route,
  body: string,
  contentType: string | undefined,
): KubeObject {
  const ns = route.namespace!;
  const old = store.get('pods', ns, route.name!);
  if (!old) throw notFound('pods', route.name!);
  let next: KubeObject;
  if (route.verb === 'patch') next = applyPatch(old, patchTypeOf(contentType), body);
  else {
    try {
      next = JSON.parse(body);
    } catch (err) {
      throw badRequest(`couldn't get version/kind; json parse error: ${(err as Error).message}`);
    }
    if (!next?.metadata?.resourceVersion) {
      throw invalidObject('Pod', route.name!, [
        {
          type: 'FieldValueInvalid',
          field: 'metadata.resourceVersion',
          message: 'Invalid value: 0x0: must be specified for an update',
        },
      ]);
    }
  }
  const stored = checkPodUpdate(old, next);
  return store.update('pods', ns, route.name!, (p) => {
    p.metadata = stored.metadata;
    p.spec = stored.spec;
  })!;
}
