/**
 * Resource quantities (`500m`, `2`, `1.5`, `128Mi`, `1G`, `1e3`) as resource.ParseQuantity reads
 * them, to compare requests with a node's capacity and a quota's limits.
 */
export const QUANTITY_REGEX = '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$';
const PATTERN = /^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$/;

const SUFFIX: Record<string, number> = {
  '': 1,
  n: 1e-9,
  u: 1e-6,
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

/** The value of a quantity, or undefined when it is not one (the server answers 422 then). */
export function parseQuantity(text: unknown): number | undefined {
  if (typeof text === 'number') return Number.isFinite(text) ? text : undefined;
  if (typeof text !== 'string') return undefined;
  const m = PATTERN.exec(text);
  if (!m || !/^[+-]?(\d+\.?\d*|\.\d+)$/.test(m[1]!)) return undefined;
  const n = Number(m[1]);
  const suffix = m[2]!;
  if (suffix in SUFFIX) return n * SUFFIX[suffix]!;
  const exp = /^[eE]([-+]?\d+)$/.exec(suffix);
  if (exp) return n * 10 ** Number(exp[1]);
  return undefined;
}
