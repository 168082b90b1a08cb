/**
 * The Kubernetes API's rules for the names we write (namespaces, service accounts, label keys and
 * values) and for resource quantities, checked before anything reaches the API server so that a
 * bad DAG file is refused at apply with the field's path, not at run time with a 422.
 */

const DNS1123_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const LABEL_NAME = /^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/;

/** Why `s` is not a DNS-1123 label (a namespace, a pod name's shape), or null when it is one. */
export function dns1123LabelProblem(s: string): string | null {
  if (s.length > 63) return `must be at most 63 characters, got ${s.length}`;
  if (!DNS1123_LABEL.test(s))
    return 'must be a DNS-1123 label: lower-case letters, digits and "-", starting and ending with a letter or digit';
  return null;
}

/** Why `s` is not a DNS-1123 subdomain (a service account's name), or null when it is one. */
export function dns1123SubdomainProblem(s: string): string | null {
  if (s.length > 253) return `must be at most 253 characters, got ${s.length}`;
  if (!DNS1123_SUBDOMAIN.test(s))
    return (
      'must be a DNS-1123 subdomain: lower-case letters, digits, "-" and ".", ' +
      'starting and ending with a letter or digit'
    );
  return null;
}

/** Why `key` is not a valid label key (`[prefix/]name`), or null. */
export function labelKeyProblem(key: string): string | null {
  const slash = key.lastIndexOf('/');
  const name = slash === -1 ? key : key.slice(slash + 1);
  if (slash !== -1) {
    const prefix = key.slice(0, slash);
    const p = prefix === '' ? 'must not be empty' : dns1123SubdomainProblem(prefix);
    if (p) return `prefix "${prefix}" ${p}`;
  }
  if (name.length === 0 || name.length > 63) return `name part must be 1-63 characters, got ${name.length}`;
  if (!LABEL_NAME.test(name))
    return 'name part must be letters, digits, "-", "_" and ".", starting and ending with a letter or digit';
  return null;
}

/** Why `value` is not a valid label value (empty, or ≤ 63 of the label name characters), or null. */
export function labelValueProblem(value: string): string | null {
  if (value === '') return null;
  if (value.length > 63) return `must be at most 63 characters, got ${value.length}`;
  if (!LABEL_NAME.test(value))
    return 'must be letters, digits, "-", "_" and ".", starting and ending with a letter or digit';
  return null;
}

const SUFFIX: Record<string, number> = {
  '': 1,
  m: 1e-3,
  k: 1e3,
  M: 1e6,
  G: 1e9,
  T: 1e12,
  P: 1e15,
  E: 1e18,
  Ki: 2 ** 10,
  Mi: 2 ** 20,
  Gi: 2 ** 30,
  Ti: 2 ** 40,
  Pi: 2 ** 50,
  Ei: 2 ** 60,
};
const QUANTITY = /^(\d+(?:\.\d*)?|\.\d+)(?:(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)|[eE]([+-]?\d+))?$/;

/**
 * A resource quantity (`500m`, `2`, `4Gi`, `1e3`) as a number of base units, or null when it is
 * not one. Negative quantities are refused: no request or limit can be below zero.
 */
export function parseQuantity(s: string): number | null {
  const m = QUANTITY.exec(s);
  if (!m) return null;
  const n = Number(m[1]);
  if (m[3] !== undefined) return n * 10 ** Number(m[3]);
  return n * SUFFIX[m[2] ?? '']!;
}
