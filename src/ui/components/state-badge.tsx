import { RunState, TaskState } from '../../gen/leoflow/v1/types_pb.js';

/** A state's name as the server writes it in events (`up_for_retry`), from the enum. */
export function runStateName(s: RunState): string {
  return (RunState[s] ?? 'unspecified').toLowerCase();
}

export function taskStateName(s: TaskState): string {
  return (TaskState[s] ?? 'unspecified').toLowerCase();
}

/** A state in its colour (styles.css `.s-<state>`). */
export function StateBadge({ state }: { state: string }) {
  return <span className={`badge s-${state}`}>{state.replaceAll('_', ' ')}</span>;
}
