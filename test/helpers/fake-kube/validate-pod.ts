import { QUANTITY_REGEX, parseQuantity } from './quantity.js';
import { duplicate, invalid, notSupported, required, type FieldError } from './status.js';

/**
 * The part of the API server's pod validation (pkg/apis/core/validation) a client can trip over,
 * with the real field paths and messages: names, labels, containers, images, env, resources,
 * restart policy and grace period.
 */
const DNS1123_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const QUALIFIED_NAME = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;
const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;
const ENV_NAME = /^[-._a-zA-Z][-._a-zA-Z0-9]*$/;

const SUBDOMAIN_MSG =
  "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL_MSG =
  "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const QUALIFIED_MSG =
  "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const VALUE_MSG =
  "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const ENV_MSG =
  "a valid environment variable name must consist of alphabetic characters, digits, '_', '-', or '.', and must not start with a digit (e.g. 'my.env-name',  or 'MY_ENV.NAME',  or 'MyEnvName1', regex used for validation is '[-._a-zA-Z][-._a-zA-Z0-9]*')";

function maxLen(n: number): string {
  return `must be no more than ${n} characters`;
}

export function validateSubdomain(field: string, value: string): FieldError[] {
  const errs: FieldError[] = [];
  if (value.length > 253) errs.push(invalid(field, value, maxLen(253)));
  if (!DNS1123_SUBDOMAIN.test(value)) errs.push(invalid(field, value, SUBDOMAIN_MSG));
  return errs;
}

function validateDns1123Label(field: string, value: string): FieldError[] {
  const errs: FieldError[] = [];
  if (value.length > 63) errs.push(invalid(field, value, maxLen(63)));
  if (!DNS1123_LABEL.test(value)) errs.push(invalid(field, value, LABEL_MSG));
  return errs;
}

function validateQualifiedName(field: string, k: string): FieldError[] {
  const errs: FieldError[] = [];
  const slash = k.indexOf('/');
  const prefix = slash >= 0 ? k.slice(0, slash) : undefined;
  const name = slash >= 0 ? k.slice(slash + 1) : k;
  if (prefix !== undefined) {
    if (prefix === '') errs.push(invalid(field, k, 'prefix part must be non-empty'));
    else if (prefix.length > 253 || !DNS1123_SUBDOMAIN.test(prefix))
      errs.push(invalid(field, k, `prefix part ${SUBDOMAIN_MSG}`));
  }
  if (name === '') errs.push(invalid(field, k, 'name part must be non-empty'));
  else {
    if (name.length > 63) errs.push(invalid(field, k, `name part ${maxLen(63)}`));
    if (!QUALIFIED_NAME.test(name)) errs.push(invalid(field, k, QUALIFIED_MSG));
  }
  return errs;
}

/** Annotation keys are qualified names; all values together at most 256 KiB. */
function validateAnnotations(field: string, annotations: unknown): FieldError[] {
  if (annotations === undefined || annotations === null) return [];
  if (typeof annotations !== 'object') return [invalid(field, annotations, 'must be a map of strings')];
  const errs: FieldError[] = [];
  let size = 0;
  for (const [k, v] of Object.entries(annotations as Record<string, unknown>)) {
    errs.push(...validateQualifiedName(field, k));
    size += k.length + String(v).length;
  }
  if (size > 256 * 1024)
    errs.push({ type: 'FieldValueTooLong', field, message: `Too long: may not be more than ${256 * 1024} bytes` });
  return errs;
}

function validateLabels(field: string, labels: unknown): FieldError[] {
  if (labels === undefined || labels === null) return [];
  if (typeof labels !== 'object') return [invalid(field, labels, 'must be a map of strings')];
  const errs: FieldError[] = [];
  for (const [k, v] of Object.entries(labels as Record<string, unknown>)) {
    errs.push(...validateQualifiedName(field, k));
    if (typeof v !== 'string') errs.push(invalid(field, v, 'must be a string'));
    else {
      if (v.length > 63) errs.push(invalid(field, v, maxLen(63)));
      if (!LABEL_VALUE.test(v)) errs.push(invalid(field, v, VALUE_MSG));
    }
  }
  return errs;
}

const RESOURCE_NAMES = new Set(['cpu', 'memory', 'ephemeral-storage', 'hugepages-2Mi', 'hugepages-1Gi']);

function validateResources(path: string, resources: any): FieldError[] {
  if (!resources) return [];
  const errs: FieldError[] = [];
  for (const kind of ['limits', 'requests'] as const) {
    const list = resources[kind];
    if (!list) continue;
    for (const [name, q] of Object.entries(list as Record<string, unknown>)) {
      const field = `${path}.resources.${kind}[${name}]`;
      if (!RESOURCE_NAMES.has(name) && !name.includes('/')) {
        errs.push(invalid(field, name, 'must be a standard resource type or fully qualified'));
        continue;
      }
      const value = parseQuantity(q);
      if (value === undefined)
        errs.push(invalid(field, q, `quantities must match the regular expression '${QUANTITY_REGEX}'`));
      else if (value < 0) errs.push(invalid(field, q, 'must be greater than or equal to 0'));
    }
  }
  for (const [name, q] of Object.entries((resources.requests ?? {}) as Record<string, unknown>)) {
    const limit = resources.limits?.[name];
    if (limit === undefined) continue;
    const r = parseQuantity(q);
    const l = parseQuantity(limit);
    if (r !== undefined && l !== undefined && r > l) {
      errs.push(invalid(`${path}.resources.requests`, q, `must be less than or equal to ${name} limit of ${limit}`));
    }
  }
  return errs;
}

function validateEnv(path: string, env: unknown): FieldError[] {
  if (env === undefined || env === null) return [];
  if (!Array.isArray(env)) return [invalid(`${path}.env`, env, 'must be a list')];
  const errs: FieldError[] = [];
  env.forEach((e: any, i: number) => {
    const field = `${path}.env[${i}]`;
    if (!e?.name) errs.push(required(`${field}.name`));
    else if (!ENV_NAME.test(e.name)) errs.push(invalid(`${field}.name`, e.name, ENV_MSG));
    const from = e?.valueFrom;
    if (from !== undefined && from !== null) {
      if (e.value !== undefined && e.value !== null && e.value !== '') {
        errs.push({
          type: 'FieldValueInvalid',
          field: `${field}.valueFrom`,
          message: 'Invalid value: "": may not be specified when `value` is not empty',
        });
      }
      const sources = ['fieldRef', 'resourceFieldRef', 'configMapKeyRef', 'secretKeyRef'].filter((k) => from[k]);
      if (sources.length !== 1)
        errs.push(invalid(`${field}.valueFrom`, '', 'may not have more than one field specified at a time'));
      for (const k of ['configMapKeyRef', 'secretKeyRef']) {
        if (!from[k]) continue;
        if (!from[k].key) errs.push(required(`${field}.valueFrom.${k}.key`));
        if (!from[k].name) errs.push(required(`${field}.valueFrom.${k}.name`));
      }
      if (from.fieldRef && !from.fieldRef.fieldPath) errs.push(required(`${field}.valueFrom.fieldRef.fieldPath`));
      if (from.resourceFieldRef && !from.resourceFieldRef.resource)
        errs.push(required(`${field}.valueFrom.resourceFieldRef.resource`));
    }
  });
  return errs;
}

/**
 * The docker reference grammar the kubelet applies (reference.ParseNormalizedNamed); the API server
 * accepts any non-blank image and the kubelet reports `InvalidImageName` for the rest.
 */
const IMAGE_REF =
  /^(?:(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:\.(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*(?::[0-9]+)?\/)?[a-z0-9]+(?:(?:[._]|__|[-]*)[a-z0-9]+)*(?:\/[a-z0-9]+(?:(?:[._]|__|[-]*)[a-z0-9]+)*)*(?::[\w][\w.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$/;

export function isValidImageReference(image: string): boolean {
  return IMAGE_REF.test(image);
}

function validateContainers(containers: unknown): FieldError[] {
  if (!Array.isArray(containers) || containers.length === 0) return [required('spec.containers')];
  const errs: FieldError[] = [];
  const names = new Set<string>();
  containers.forEach((c: any, i: number) => {
    const path = `spec.containers[${i}]`;
    if (!c?.name) errs.push(required(`${path}.name`));
    else {
      errs.push(...validateDns1123Label(`${path}.name`, c.name));
      if (names.has(c.name)) errs.push(duplicate(`${path}.name`, c.name));
      names.add(c.name);
    }
    if (typeof c?.image !== 'string' || c.image.trim() === '') errs.push(required(`${path}.image`));
    if (c?.command !== undefined && !Array.isArray(c.command))
      errs.push(invalid(`${path}.command`, c.command, 'must be a list of strings'));
    if (c?.args !== undefined && !Array.isArray(c.args))
      errs.push(invalid(`${path}.args`, c.args, 'must be a list of strings'));
    if (c?.imagePullPolicy !== undefined && !['Always', 'IfNotPresent', 'Never'].includes(c.imagePullPolicy)) {
      errs.push(notSupported(`${path}.imagePullPolicy`, c.imagePullPolicy, ['Always', 'IfNotPresent', 'Never']));
    }
    errs.push(...validateEnv(path, c?.env));
    errs.push(...validateResources(path, c?.resources));
  });
  return errs;
}

/** Every error in a pod about to be created, in the order the server reports them (metadata first). */
export function validatePod(pod: any): FieldError[] {
  const errs: FieldError[] = [];
  const name = pod?.metadata?.name;
  if (!name) errs.push(required('metadata.name', 'name or generateName is required'));
  else errs.push(...validateSubdomain('metadata.name', name));
  errs.push(...validateLabels('metadata.labels', pod?.metadata?.labels));
  errs.push(...validateAnnotations('metadata.annotations', pod?.metadata?.annotations));
  const spec = pod?.spec;
  if (!spec) return [...errs, required('spec.containers')];
  errs.push(...validateContainers(spec.containers));
  if (spec.restartPolicy !== undefined && !['Always', 'OnFailure', 'Never'].includes(spec.restartPolicy)) {
    errs.push(notSupported('spec.restartPolicy', spec.restartPolicy, ['Always', 'OnFailure', 'Never']));
  }
  const grace = spec.terminationGracePeriodSeconds;
  if (grace !== undefined && grace !== null && (!Number.isInteger(grace) || grace < 0)) {
    errs.push(invalid('spec.terminationGracePeriodSeconds', grace, 'must be greater than or equal to 0'));
  }
  const deadline = spec.activeDeadlineSeconds;
  if (deadline !== undefined && deadline !== null && (!Number.isInteger(deadline) || deadline < 1)) {
    errs.push(invalid('spec.activeDeadlineSeconds', deadline, 'must be between 1 and 2147483647, inclusive'));
  }
  if (spec.serviceAccountName) errs.push(...validateSubdomain('spec.serviceAccountName', spec.serviceAccountName));
  errs.push(...validateLabels('spec.nodeSelector', spec.nodeSelector));
  if (spec.tolerations !== undefined && !Array.isArray(spec.tolerations))
    errs.push(invalid('spec.tolerations', spec.tolerations, 'must be a list'));
  (Array.isArray(spec.tolerations) ? spec.tolerations : []).forEach((t: any, i: number) => {
    if (t?.operator !== undefined && !['Exists', 'Equal'].includes(t.operator))
      errs.push(notSupported(`spec.tolerations[${i}].operator`, t.operator, ['Equal', 'Exists']));
    if (t?.effect && !['NoSchedule', 'PreferNoSchedule', 'NoExecute'].includes(t.effect))
      errs.push(
        notSupported(`spec.tolerations[${i}].effect`, t.effect, ['NoExecute', 'NoSchedule', 'PreferNoSchedule']),
      );
  });
  return errs;
}
