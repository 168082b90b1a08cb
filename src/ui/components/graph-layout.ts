import { graphlib, layout } from '@dagrejs/dagre';
import type { TaskSpec } from '../../gen/leoflow/v1/types_pb.js';

export const NODE_H = 36;

/** Past these, dagre takes seconds (its crossing reduction grows fast): a plain layered layout is used. */
const DAGRE_MAX_NODES = 150;
const DAGRE_MAX_EDGES = 300;
/** Past this many edges the big layout draws the boxes alone: thousands of lines are noise, and slow. */
const MAX_DRAWN_EDGES = 3_000;

export interface PlacedGraph {
  nodes: { id: string; x: number; y: number; w: number }[];
  edges: { key: string; points: string }[];
  width: number;
  height: number;
  /** Edges left undrawn (a very large DAG). */
  hiddenEdges: number;
}

const nodeWidth = (id: string) => Math.min(220, Math.max(80, 28 + id.length * 7.5));

/** Where each task's box goes, left to right by dependency: dagre for small DAGs, layers for big ones. */
export function placeTasks(tasks: TaskSpec[]): PlacedGraph {
  const ids = new Set(tasks.map((t) => t.id));
  const edgeCount = tasks.reduce((n, t) => n + t.dependsOn.filter((d) => ids.has(d)).length, 0);
  return tasks.length <= DAGRE_MAX_NODES && edgeCount <= DAGRE_MAX_EDGES ? dagreLayout(tasks) : layered(tasks, ids);
}

function dagreLayout(tasks: TaskSpec[]): PlacedGraph {
  const g = new graphlib.Graph();
  g.setGraph({ rankdir: 'LR', nodesep: 18, ranksep: 48, marginx: 12, marginy: 12 });
  g.setDefaultEdgeLabel(() => ({}));
  for (const t of tasks) g.setNode(t.id, { width: nodeWidth(t.id), height: NODE_H });
  for (const t of tasks) for (const up of t.dependsOn) if (g.hasNode(up)) g.setEdge(up, t.id);
  layout(g);
  const nodes = g.nodes().map((id) => {
    const n = g.node(id) as { x: number; y: number; width: number };
    return { id, x: n.x, y: n.y, w: n.width };
  });
  const edges = g.edges().map((e) => {
    const pts = (g.edge(e) as { points: { x: number; y: number }[] }).points;
    return { key: `${e.v}>${e.w}`, points: pts.map((p) => `${p.x},${p.y}`).join(' ') };
  });
  const size = g.graph() as { width?: number; height?: number };
  return {
    nodes,
    edges,
    width: Math.max(size.width ?? 0, 100),
    height: Math.max(size.height ?? 0, NODE_H + 24),
    hiddenEdges: 0,
  };
}

/** Each task in the column of its longest path from a root, in file order within it: linear time. */
function layered(tasks: TaskSpec[], ids: Set<string>): PlacedGraph {
  const rank = new Map<string, number>();
  const downs = new Map<string, string[]>();
  const waiting = new Map<string, number>();
  for (const t of tasks) {
    const ups = t.dependsOn.filter((d) => ids.has(d));
    waiting.set(t.id, ups.length);
    for (const u of ups) downs.set(u, [...(downs.get(u) ?? []), t.id]);
  }
  const ready = tasks.filter((t) => waiting.get(t.id) === 0).map((t) => t.id);
  for (const id of ready) rank.set(id, 0);
  for (let i = 0; i < ready.length; i++) {
    const id = ready[i]!;
    for (const d of downs.get(id) ?? []) {
      rank.set(d, Math.max(rank.get(d) ?? 0, rank.get(id)! + 1));
      const left = waiting.get(d)! - 1;
      waiting.set(d, left);
      if (left === 0) ready.push(d);
    }
  }
  const columns: string[][] = [];
  for (const t of tasks) (columns[rank.get(t.id) ?? 0] ??= []).push(t.id);
  const pos = new Map<string, { x: number; y: number; w: number }>();
  let x = 12;
  let height = 0;
  for (const col of columns) {
    if (!col) continue;
    const w = Math.max(...col.map(nodeWidth));
    col.forEach((id, i) => pos.set(id, { x: x + w / 2, y: 12 + i * (NODE_H + 12) + NODE_H / 2, w: nodeWidth(id) }));
    height = Math.max(height, 24 + col.length * (NODE_H + 12));
    x += w + 48;
  }
  const nodes = tasks.map((t) => ({ id: t.id, ...pos.get(t.id)! }));
  const edges: PlacedGraph['edges'] = [];
  let hiddenEdges = 0;
  for (const t of tasks)
    for (const u of t.dependsOn) {
      if (!ids.has(u)) continue;
      if (edges.length >= MAX_DRAWN_EDGES) {
        hiddenEdges++;
        continue;
      }
      const a = pos.get(u)!;
      const b = pos.get(t.id)!;
      edges.push({ key: `${u}>${t.id}`, points: `${a.x + a.w / 2},${a.y} ${b.x - b.w / 2},${b.y}` });
    }
  return { nodes, edges, width: x, height, hiddenEdges };
}
