/**
 * A seeded pseudo-random generator (mulberry32), so one seed replays one chaos schedule: the same
 * faults, targets and delays in the same order. What the processes do in between is not replayed
 * (the machine's timing decides that), so a seed reproduces the schedule, not every interleaving.
 */
export interface Prng {
  readonly seed: number;
  /** Uniform in [0, 1). */
  next(): number;
  /** An integer in [min, max]. */
  int(min: number, max: number): number;
  /** One element of a non-empty list. */
  pick<T>(items: readonly T[]): T;
  /** One key of `weights`, with probability proportional to its weight. */
  weighted<K extends string>(weights: Readonly<Record<K, number>>): K;
  /** An independent generator derived from this seed and `label` (one stream per concern). */
  fork(label: string): Prng;
}

export function createPrng(seed: number): Prng {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const prng: Prng = {
    seed,
    next,
    int: (min, max) => min + Math.floor(next() * (max - min + 1)),
    pick: (items) => {
      if (items.length === 0) throw new Error('pick from an empty list');
      return items[Math.floor(next() * items.length)]!;
    },
    weighted: (weights) => {
      const entries = Object.entries(weights) as [keyof typeof weights, number][];
      const total = entries.reduce((s, [, w]) => s + w, 0);
      let r = next() * total;
      for (const [k, w] of entries) if ((r -= w) < 0) return k;
      return entries[entries.length - 1]![0];
    },
    fork: (label) => createPrng(hash(`${seed}/${label}`)),
  };
  return prng;
}

/** FNV-1a, 32 bits. */
function hash(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

/** The seed to use: LEOFLOW_CHAOS_SEED when set (a replay), else a fresh one. */
export function chaosSeed(env: NodeJS.ProcessEnv = process.env): number {
  const raw = env.LEOFLOW_CHAOS_SEED;
  if (raw === undefined || raw === '') return Math.floor(Math.random() * 2 ** 31);
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0 || n > 2 ** 32 - 1)
    throw new Error(`LEOFLOW_CHAOS_SEED must be an integer from 0 to 4294967295, got ${JSON.stringify(raw)}`);
  return n;
}
