import { readFile } from 'node:fs/promises';
import { round } from './pg-xacts.js';

/** Self time by function from a .cpuprofile (samples × time deltas), idle excluded. */
export async function profileTop(file: string, n: number) {
  const prof = JSON.parse(await readFile(file, 'utf8')) as {
    nodes: { id: number; callFrame: { functionName: string; url: string; lineNumber: number }; children?: number[] }[];
    samples: number[];
    timeDeltas: number[];
  };
  const byId = new Map(prof.nodes.map((nd) => [nd.id, nd]));
  const parent = new Map<number, number>();
  for (const nd of prof.nodes) for (const c of nd.children ?? []) parent.set(c, nd.id);
  /** The package (node_modules/x) or Leoflow folder (dist/x) of the nearest frame, self or caller,
   *  that is not Node's own: who a native write or a GC pause is done for. */
  const owner = (id: number): string => {
    for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
      const u = byId.get(cur)!.callFrame.url;
      const m = /\/(node_modules\/(?:@[^/]+\/)?[^/]+)\//.exec(u) ?? /\/(dist\/[^/]+)\//.exec(u);
      if (m) return m[1]!;
    }
    return byId.get(id)!.callFrame.functionName || '(anonymous)';
  };
  const attributed = new Map<string, number>();
  const self = new Map<string, number>();
  const byArea = new Map<string, number>();
  let total = 0;
  prof.samples.forEach((id, i) => {
    const cf = byId.get(id)!.callFrame;
    const us = prof.timeDeltas[i] ?? 0;
    if (cf.functionName === '(idle)') return;
    total += us;
    const where = cf.url
      .replace(/^file:\/\//, '')
      .replace(/^.*\/(node_modules\/)/, '$1')
      .replace(/^.*\/(dist\/)/, '$1');
    const key = `${cf.functionName || '(anonymous)'} ${where}:${cf.lineNumber + 1}`;
    self.set(key, (self.get(key) ?? 0) + us);
    const area =
      cf.url === ''
        ? cf.functionName
        : where.startsWith('node_modules/')
          ? where
              .split('/')
              .slice(0, where.startsWith('node_modules/@') ? 3 : 2)
              .join('/')
          : where.startsWith('dist/')
            ? where.split('/').slice(0, 2).join('/')
            : where.startsWith('node:')
              ? 'node: internals'
              : where;
    byArea.set(area, (byArea.get(area) ?? 0) + us);
    const o = owner(id);
    attributed.set(o, (attributed.get(o) ?? 0) + us);
  });
  const top = (m: Map<string, number>) =>
    [...m]
      .sort((a, b) => b[1] - a[1])
      .slice(0, n)
      .map(([k, us]) => ({ what: k, 'self ms': round(us / 1000, 0), share: `${round((100 * us) / total, 1)} %` }));
  return { totalMs: total / 1000, functions: top(self), areas: top(byArea), attributed: top(attributed) };
}
