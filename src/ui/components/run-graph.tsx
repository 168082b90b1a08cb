import { useMemo } from 'react';
import type { TaskSpec } from '../../gen/leoflow/v1/types_pb.js';
import { navigate } from '../live/use-route.js';
import { NODE_H, placeTasks } from './graph-layout.js';

/**
 * Past this many tasks the graph is not drawn: 10,000 boxes are an unreadable, slow SVG (every
 * live change repaints them). The run's tasks are then counted by state; the table lists each.
 */
export const MAX_GRAPH_TASKS = 1_000;

/**
 * A run's DAG, laid out left to right (graph-layout.ts), each task a box in its state's colour; a click
 * opens the task. The layout depends only on the tasks and edges, so live state changes repaint
 * without laying out again.
 */
export function RunGraph({ runId, tasks, states }: { runId: string; tasks: TaskSpec[]; states: Map<string, string> }) {
  const tooBig = tasks.length > MAX_GRAPH_TASKS;
  const drawn = useMemo(
    () => (tooBig ? { nodes: [], edges: [], width: 0, height: 0, hiddenEdges: 0 } : placeTasks(tasks)),
    [tasks, tooBig],
  );
  if (tooBig) {
    const counts = new Map<string, number>();
    for (const s of states.values()) counts.set(s, (counts.get(s) ?? 0) + 1);
    return (
      <div className="graph-wrap graph-summary" data-graph="summary">
        <p className="muted small note">
          {tasks.length.toLocaleString()} tasks: the graph is drawn up to {MAX_GRAPH_TASKS.toLocaleString()} tasks. By
          state:
        </p>
        <p>
          {[...counts.entries()].map(([state, n]) => (
            <span key={state} className={`badge s-${state}`} data-state-count={state}>
              {state} {n.toLocaleString()}
            </span>
          ))}
        </p>
      </div>
    );
  }
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
      {drawn.hiddenEdges > 0 && (
        <p className="muted small note">
          {drawn.hiddenEdges} more dependencies are not drawn; the table lists every task.
        </p>
      )}
    </div>
  );
}
