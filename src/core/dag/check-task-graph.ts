/**
 * The checks across tasks, on the graph that `depends_on` draws: duplicate ids, dependencies on
 * tasks that do not exist, and cycles. They run on drafts, so a DAG with broken fields still
 * gets its graph problems reported in the same pass.
 */
import type { DagIssue } from '../dag-spec.js';
import type { TaskDraft } from './read-task.js';
import { suggest } from './suggest.js';

/** One cycle per DFS back edge can still be many in a hostile file; the first ones suffice. */
const MAX_CYCLE_ISSUES = 100;
/** Budget of id comparisons for "did you mean" suggestions, so 10,000 bad references stay cheap. */
const SUGGESTION_BUDGET = 200_000;

/**
 * Records in `firstIndex` where the draft's id is first defined, or reports the draft as a
 * duplicate of that first definition. Called once per task in file order, right after the task
 * is read, so the issue sits with that task's other issues.
 */
export function indexTaskId(draft: TaskDraft, firstIndex: Map<string, number>, path: string, issues: DagIssue[]): void {
  if (draft.id === undefined) return;
  const first = firstIndex.get(draft.id);
  if (first === undefined) firstIndex.set(draft.id, draft.index);
  else {
    issues.push({
      path: `${path}[${draft.index}].id`,
      message: `duplicate task id "${draft.id}" (first defined at ${path}[${first}])`,
    });
  }
}

/**
 * Reports every dependency on an unknown task, then every cycle. `firstIndex` must hold every
 * task id (see {@link indexTaskId}); `path` is the path of the `tasks` list.
 */
export function checkTaskGraph(
  drafts: TaskDraft[],
  firstIndex: Map<string, number>,
  path: string,
  issues: DagIssue[],
): void {
  checkDependencies(drafts, firstIndex, path, issues);
  checkCycles(drafts, firstIndex, path, issues);
}

function checkDependencies(
  drafts: TaskDraft[],
  firstIndex: Map<string, number>,
  path: string,
  issues: DagIssue[],
): void {
  const ids = [...firstIndex.keys()];
  const invalidIds = new Set(drafts.map((d) => d.invalidId));
  let budget = SUGGESTION_BUDGET;
  for (const draft of drafts) {
    for (const dep of draft.deps) {
      if (firstIndex.has(dep.id) || invalidIds.has(dep.id)) continue;
      let hint = '';
      if (budget >= ids.length) {
        budget -= ids.length;
        const close = suggest(dep.id, ids);
        if (close !== undefined) hint = ` (did you mean "${close}"?)`;
      }
      const who = draft.id === undefined ? `${path}[${draft.index}]` : `"${draft.id}"`;
      issues.push({ path: dep.path, message: `task ${who} depends on unknown task "${dep.id}"${hint}` });
    }
  }
}

/**
 * Iterative DFS along upstream → downstream edges (a task with 10,000 levels of dependencies
 * must not overflow the stack). Each back edge closes one cycle, made of the DFS path from its
 * target to its source; duplicate task ids (the later definitions) are left out of the graph.
 */
function checkCycles(drafts: TaskDraft[], firstIndex: Map<string, number>, path: string, issues: DagIssue[]): void {
  const n = drafts.length;
  const downstream: number[][] = drafts.map(() => []);
  /** Path of the depends_on entry for the edge `from → to`, keyed `${to}:${from}`. */
  const edgePath = new Map<string, string>();
  for (const draft of drafts) {
    if (draft.id === undefined || firstIndex.get(draft.id) !== draft.index) continue;
    for (const dep of draft.deps) {
      const from = firstIndex.get(dep.id);
      if (from === undefined) continue;
      downstream[from]?.push(draft.index);
      edgePath.set(`${draft.index}:${from}`, dep.path);
    }
  }

  const NEW = 0;
  const ON_PATH = 1;
  const DONE = 2;
  const state = new Uint8Array(n);
  const depth = new Int32Array(n);
  let found = 0;
  for (let root = 0; root < n; root++) {
    if (state[root] !== NEW) continue;
    const stack = [root];
    const cursor = [0];
    state[root] = ON_PATH;
    depth[root] = 0;
    while (stack.length > 0) {
      const top = stack.length - 1;
      const node = stack[top] as number;
      const next = (downstream[node] as number[])[cursor[top] as number];
      if (next === undefined) {
        state[node] = DONE;
        stack.pop();
        cursor.pop();
        continue;
      }
      cursor[top] = (cursor[top] as number) + 1;
      if (state[next] === NEW) {
        state[next] = ON_PATH;
        depth[next] = stack.length;
        stack.push(next);
        cursor.push(0);
      } else if (state[next] === ON_PATH) {
        found += 1;
        if (found <= MAX_CYCLE_ISSUES) issues.push(cycleIssue(stack.slice(depth[next]), drafts, edgePath, path));
      }
    }
  }
  if (found > MAX_CYCLE_ISSUES) {
    issues.push({ path, message: `${found - MAX_CYCLE_ISSUES} more cycles not shown` });
  }
}

function cycleIssue(members: number[], drafts: TaskDraft[], edgePath: Map<string, string>, path: string): DagIssue {
  // Start at the member defined first in the file, so the same cycle always reads the same.
  const start = members.indexOf(Math.min(...members));
  const ordered = [...members.slice(start), ...members.slice(0, start)];
  const names = ordered.map((i) => drafts[i]?.id ?? '?');
  const first = ordered[0] as number;
  const last = ordered[ordered.length - 1] as number;
  return {
    path: edgePath.get(`${first}:${last}`) ?? `${path}[${first}].depends_on`,
    message: `cycle: ${[...names, names[0]].join(' → ')}`,
  };
}
