/**
 * "Did you mean" suggestions for misspelt keys, enum values and task ids. A typo is at most a
 * few edits away, so the distance computation stops early once a candidate is clearly too far.
 */

/** The closest candidate by edit distance (case-insensitive), if it is close enough to be a typo. */
export function suggest(input: string, candidates: readonly string[]): string | undefined {
  const needle = input.toLowerCase();
  const limit = Math.min(3, Math.max(1, Math.floor(needle.length / 3)));
  let best: string | undefined;
  let bestDistance = limit + 1;
  for (const candidate of candidates) {
    const d = editDistance(needle, candidate.toLowerCase(), bestDistance - 1);
    if (d < bestDistance) {
      best = candidate;
      bestDistance = d;
    }
  }
  return best;
}

/** Optimal-string-alignment distance (a swap of neighbours costs 1), or max + 1 once over max. */
function editDistance(a: string, b: string, max: number): number {
  if (Math.abs(a.length - b.length) > max) return max + 1;
  let prev2 = new Array<number>(b.length + 1).fill(0);
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = new Array<number>(b.length + 1).fill(0);
    row[0] = i;
    let rowMin = i;
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let d = Math.min((prev[j] as number) + 1, (row[j - 1] as number) + 1, (prev[j - 1] as number) + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1])
        d = Math.min(d, (prev2[j - 2] as number) + 1);
      row[j] = d;
      rowMin = Math.min(rowMin, d);
    }
    if (rowMin > max) return max + 1;
    prev2 = prev;
    prev = row;
  }
  return prev[b.length] as number;
}
