import { RunState } from '../gen/leoflow/v1/types_pb.js';

/** The run states a user may name (`run list --state`), as the CLI prints them. */
export const RUN_STATE_NAMES = ['queued', 'running', 'success', 'failed', 'cancelled'] as const;

const BY_NAME: Record<(typeof RUN_STATE_NAMES)[number], RunState> = {
  queued: RunState.QUEUED,
  running: RunState.RUNNING,
  success: RunState.SUCCESS,
  failed: RunState.FAILED,
  cancelled: RunState.CANCELLED,
};

/**
 * `--state failed` or `--state queued,running`, checked before anything is sent: a name that is
 * no run state is an error naming it and the states there are.
 */
export function parseRunStates(value: string): RunState[] {
  const names = value.split(',').map((n) => n.trim().toLowerCase());
  const out: RunState[] = [];
  for (const name of names) {
    const state = (BY_NAME as Record<string, RunState | undefined>)[name];
    if (state === undefined) {
      throw new Error(
        `--state: ${JSON.stringify(name)} is not a run state; ` +
          `give one of ${RUN_STATE_NAMES.join(', ')} (several comma-separated)`,
      );
    }
    if (!out.includes(state)) out.push(state);
  }
  return out;
}
