export { runStateName, taskStateName } from '../../wire/state-names.js';

/** A state in its colour (styles.css `.s-<state>`). */
export function StateBadge({ state }: { state: string }) {
  return <span className={`badge s-${state}`}>{state.replaceAll('_', ' ')}</span>;
}
