import { graphlib, layout } from '@dagrejs/dagre';
import { useMemo } from 'react';
import type { TaskSpec } from '../../gen/leoflow/v1/types_pb.js';
import { navigate } from '../live/use-route.js';

const NODE_H = 36;

/**
 * A run's DAG, laid out by dagre (left to right), each task a box in its state's colour; a click
 * opens the task. The layout depends only on the tasks and edges, so live state changes repaint
 * without laying out again.
 */
export function RunGraph({ runId, tasks, states }: { runId: string; tasks: TaskSpec[]; states: Map<string, string> }) {
  const drawn = useMemo(() => place(tasks), [tasks]);
  return (
    <div className="graph-wrap">
      <svg
        className="graph"
        width={drawn.width}
        height={drawn.height}
        viewBox={`0 0 ${drawn.width} ${drawn.height}`}
        role="img"
        aria-label="task graph"
      >
        <defs>
          <marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto">
            <path d="M0,0 L10,5 L0,10 z" fill="#8a94a6" />
          </marker>
        </defs>
        {drawn.edges.map((e) => (
          <polyline key={e.key} className="edge" points={e.points} markerEnd="url(#arrow)" />
        ))}
        {drawn.nodes.map((n) => {
          const state = states.get(n.id) ?? 'none';
          return (
            <g
              key={n.id}
              className={`node s-${state}`}
              data-task={n.id}
              data-state={state}
              transform={`translate(${n.x - n.w / 2},${n.y - NODE_H / 2})`}
              onClick={() => navigate(`/runs/${runId}/tasks/${encodeURIComponent(n.id)}`)}
            >
              <rect width={n.w} height={NODE_H} rx={6} />
              <text x={n.w / 2} y={NODE_H / 2 + 4} textAnchor="middle">
                {n.id}
              </text>
              <title>{`${n.id}: ${state}`}</title>
            </g>
          );
        })}
      </svg>
    </div>
  );
}

function place(tasks: TaskSpec[]) {
  const g = new graphlib.Graph();
  g.setGraph({ rankdir: 'LR', nodesep: 18, ranksep: 48, marginx: 12, marginy: 12 });
  g.setDefaultEdgeLabel(() => ({}));
  for (const t of tasks)
    g.setNode(t.id, { width: Math.min(220, Math.max(80, 28 + t.id.length * 7.5)), height: NODE_H });
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
  const graph = g.graph() as { width?: number; height?: number };
  return { nodes, edges, width: Math.max(graph.width ?? 0, 100), height: Math.max(graph.height ?? 0, NODE_H + 24) };
}
