/**
 * A DAG's shape as text, for `dag show`: tasks in layers from top to bottom (a task one layer below
 * the last of its dependencies), with box-drawing lines from each task down to those that depend on
 * it. An edge that skips layers passes through them as a `│`. Between two layers, edges that form
 * a full fan (every upper task to every lower one: a fan-out, a fan-in, a chain) share one line;
 * other edges get a line per upper task, so no line reads as an edge that is not there.
 */

export interface DagNode {
  id: string;
  dependsOn: readonly string[];
}

/** A task, or a point where an edge crosses a layer (`virtual`), placed in its layer. */
interface Slot {
  key: string;
  label: string;
  virtual: boolean;
  /** Keys of the slots above it that it hangs from. */
  parents: string[];
  x: number;
}

const GAP = 3;

export function drawDag(tasks: readonly DagNode[]): string {
  if (tasks.length === 0) return '(no tasks)';
  const order = new Map(tasks.map((t, i) => [t.id, i]));
  const layerOf = new Map<string, number>();
  const layer = (id: string): number => {
    const known = layerOf.get(id);
    if (known !== undefined) return known;
    const deps = tasks[order.get(id)!]!.dependsOn.filter((d) => order.has(d));
    const l = deps.length === 0 ? 0 : 1 + Math.max(...deps.map(layer));
    layerOf.set(id, l);
    return l;
  };
  const depth = Math.max(...tasks.map((t) => layer(t.id))) + 1;
  const layers: Slot[][] = Array.from({ length: depth }, () => []);
  for (const t of tasks) layers[layer(t.id)]!.push({ key: t.id, label: t.id, virtual: false, parents: [], x: 0 });
  // Edges: a long one is a chain of virtual slots, one in each layer it crosses.
  for (const t of tasks) {
    const l = layer(t.id);
    const slot = layers[l]!.find((s) => s.key === t.id)!;
    for (const dep of t.dependsOn) {
      if (!order.has(dep)) continue;
      let above = dep;
      for (let m = layer(dep) + 1; m < l; m++) {
        const key = `${dep}\u0000${t.id}\u0000${m}`;
        layers[m]!.push({ key, label: '│', virtual: true, parents: [above], x: 0 });
        above = key;
      }
      slot.parents.push(above);
    }
  }
  // Each layer ordered by where its parents stand (fewer crossings), ties by the file's order.
  for (let l = 1; l < depth; l++) {
    const index = new Map(layers[l - 1]!.map((s, i) => [s.key, i]));
    const mean = (s: Slot) => s.parents.reduce((sum, p) => sum + index.get(p)!, 0) / Math.max(1, s.parents.length);
    layers[l]!.sort((a, b) => mean(a) - mean(b));
  }
  // Left to right, each slot under its leftmost parent when there is room (a chain stays straight).
  const xOf = new Map<string, number>();
  for (const row of layers) {
    let x = 0;
    for (const s of row) {
      const under = s.parents.length === 0 ? 0 : Math.min(...s.parents.map((p) => xOf.get(p)!));
      s.x = Math.max(x, under);
      xOf.set(s.key, s.x);
      x = s.x + s.label.length + GAP;
    }
  }
  const out: string[] = [];
  for (let l = 0; l < depth; l++) {
    out.push(nodeRow(layers[l]!));
    if (l + 1 < depth) out.push(...band(layers[l]!, layers[l + 1]!));
  }
  return out.map((line) => line.trimEnd()).join('\n');
}

function nodeRow(row: Slot[]): string {
  let line = '';
  for (const s of row) line = line.padEnd(s.x) + s.label;
  return line;
}

/** Which way a cell's line goes. */
const UP = 1;
const DOWN = 2;
const LEFT = 4;
const RIGHT = 8;
const GLYPH: Record<number, string> = {
  [UP]: '│',
  [DOWN]: '│',
  [UP | DOWN]: '│',
  [LEFT]: '─',
  [RIGHT]: '─',
  [LEFT | RIGHT]: '─',
  [DOWN | RIGHT]: '┌',
  [DOWN | LEFT]: '┐',
  [UP | RIGHT]: '└',
  [UP | LEFT]: '┘',
  [UP | DOWN | RIGHT]: '├',
  [UP | DOWN | LEFT]: '┤',
  [DOWN | LEFT | RIGHT]: '┬',
  [UP | LEFT | RIGHT]: '┴',
  [UP | DOWN | LEFT | RIGHT]: '┼',
};

/** The lines from one layer's slots down to the next's, ending in an arrow at each task. */
function band(upper: Slot[], lower: Slot[]): string[] {
  const xOf = new Map(upper.map((s) => [s.key, s.x]));
  const edges = lower.flatMap((c) => c.parents.map((p) => ({ from: p, to: c })));
  // Groups whose lines do not overlap share a row.
  const placed: { g: Edge[]; lo: number; hi: number; row: number }[] = [];
  for (const g of lineGroups(edges)) {
    const xs = g.flatMap((e) => [xOf.get(e.from)!, e.to.x]);
    const lo = Math.min(...xs);
    const hi = Math.max(...xs);
    let row = 0;
    while (placed.some((p) => p.row === row && !(p.hi < lo || hi < p.lo))) row++;
    placed.push({ g, lo, hi, row });
  }
  const width = Math.max(...upper.map((s) => s.x + 1), ...lower.map((s) => s.x + 1));
  const rows: number[][] = Array.from({ length: Math.max(...placed.map((p) => p.row)) + 1 }, () =>
    new Array<number>(width).fill(0),
  );
  // The row where each upper slot's line turns, and the first row that reaches each lower slot.
  const turnRow = new Map<string, number>();
  const reachRow = new Map<Slot, number>();
  for (const { g, row } of placed) {
    for (const e of g) {
      turnRow.set(e.from, row);
      reachRow.set(e.to, Math.min(row, reachRow.get(e.to) ?? row));
    }
  }
  for (const { g, lo, hi, row } of placed) {
    const cells = rows[row]!;
    for (let x = lo; x <= hi; x++) cells[x]! |= (x > lo ? LEFT : 0) | (x < hi ? RIGHT : 0);
    for (const e of g) {
      cells[xOf.get(e.from)!]! |= UP;
      cells[e.to.x]! |= DOWN;
    }
  }
  // Vertical lines through the rows: from each upper slot down to its turn, from each lower
  // slot's first reach down to the arrow.
  rows.forEach((cells, r) => {
    for (const [key, turn] of turnRow) if (r < turn) cells[xOf.get(key)!]! |= UP | DOWN;
    for (const [slot, reach] of reachRow) if (r > reach) cells[slot.x]! |= UP | DOWN;
  });
  const lines = rows.map((cells) => cells.map((c) => (c === 0 ? ' ' : GLYPH[c]!)).join(''));
  let arrows = '';
  for (const s of lower) if (s.parents.length > 0) arrows = arrows.padEnd(s.x) + (s.virtual ? '│' : '▼');
  lines.push(arrows);
  return lines;
}

type Edge = { from: string; to: Slot };

/**
 * The edges of a band split into groups that each draw as one horizontal line: the edges of a
 * connected part share a line when every upper task in it goes to every lower one; otherwise
 * each upper task gets its own line.
 */
function lineGroups(edges: Edge[]): Edge[][] {
  const parts: Edge[][] = [];
  const partOf = new Map<string, Edge[]>();
  for (const e of edges) {
    const a = partOf.get(`u:${e.from}`);
    const b = partOf.get(`l:${e.to.key}`);
    let part = a ?? b;
    if (!part) {
      part = [];
      parts.push(part);
    }
    if (a && b && a !== b) {
      a.push(...b);
      parts.splice(parts.indexOf(b), 1);
      for (const m of b) {
        partOf.set(`u:${m.from}`, a);
        partOf.set(`l:${m.to.key}`, a);
      }
      part = a;
    }
    part.push(e);
    partOf.set(`u:${e.from}`, part);
    partOf.set(`l:${e.to.key}`, part);
  }
  return parts.flatMap((part) => {
    const froms = new Set(part.map((e) => e.from));
    const tos = new Set(part.map((e) => e.to));
    if (froms.size * tos.size === part.length) return [part];
    return [...froms].map((f) => part.filter((e) => e.from === f));
  });
}
