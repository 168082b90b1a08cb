import { badRequest } from './status.js';

/**
 * Label selectors as `labels.Parse` reads them: `a=b`, `a==b`, `a!=b`, `a in (x,y)`,
 * `a notin (x)`, `a` (exists) and `!a` (does not exist), comma-separated and all required.
 */
type Requirement =
  | { op: 'eq' | 'neq'; key: string; value: string }
  | { op: 'in' | 'notin'; key: string; values: string[] }
  | { op: 'exists' | 'notexists'; key: string };

export type LabelSelector = (labels: Record<string, string> | undefined) => boolean;

/** Splits on commas outside parentheses. */
function splitTerms(text: string): string[] {
  const terms: string[] = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '(') depth++;
    else if (c === ')') depth--;
    else if (c === ',' && depth === 0) {
      terms.push(text.slice(start, i));
      start = i + 1;
    }
  }
  terms.push(text.slice(start));
  return terms.map((t) => t.trim()).filter((t) => t !== '');
}

const KEY = /^([A-Za-z0-9][-A-Za-z0-9_./]*)?[A-Za-z0-9]$/;
const VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;

function parseTerm(term: string): Requirement {
  let m = /^!\s*(\S+)$/.exec(term);
  if (m) return { op: 'notexists', key: key(m[1]!, term) };
  m = /^(\S+?)\s+(in|notin)\s*\(([^)]*)\)$/.exec(term);
  if (m) {
    const values = m[3]!.split(',').map((v) => value(v.trim(), term));
    return { op: m[2] as 'in' | 'notin', key: key(m[1]!, term), values };
  }
  m = /^([^=!\s]+)\s*(==|=|!=)\s*(\S*)$/.exec(term);
  if (m) return { op: m[2] === '!=' ? 'neq' : 'eq', key: key(m[1]!, term), value: value(m[3]!, term) };
  if (KEY.test(term)) return { op: 'exists', key: term };
  throw badRequest(`unable to parse requirement: found '${term}', expected: in, notin, =, ==, !=, gt, lt`);
}

function key(k: string, term: string): string {
  if (!KEY.test(k)) throw badRequest(`unable to parse requirement: invalid label key "${k}" in "${term}"`);
  return k;
}

function value(v: string, term: string): string {
  if (v.length > 63 || !VALUE.test(v))
    throw badRequest(
      `unable to parse requirement: invalid label value: "${v}" in "${term}": must be no more than 63 characters and consist of alphanumeric characters, '-', '_' or '.', starting and ending with an alphanumeric character`,
    );
  return v;
}

export function parseLabelSelector(text: string | null | undefined): LabelSelector {
  if (!text) return () => true;
  const reqs = splitTerms(text).map(parseTerm);
  return (labels) => {
    const l = labels ?? {};
    return reqs.every((r) => {
      const has = Object.prototype.hasOwnProperty.call(l, r.key);
      const v = l[r.key];
      switch (r.op) {
        case 'eq':
          return has && v === r.value;
        case 'neq':
          return !has || v !== r.value;
        case 'in':
          return has && r.values.includes(v!);
        case 'notin':
          return !has || !r.values.includes(v!);
        case 'exists':
          return has;
        case 'notexists':
          return !has;
      }
    });
  };
}
