import { RunState, TaskState } from '../gen/leoflow/v1/types_pb.js';

/**
 * A state's name as the server writes it in events and the CLI and dashboard show it
 * (`up_for_retry`), from the wire's enum. Shared by both: a browser-safe module of the API's own.
 */
export function runStateName(s: RunState): string {
  return (RunState[s] ?? 'unspecified').toLowerCase();
}

export function taskStateName(s: TaskState): string {
  return (TaskState[s] ?? 'unspecified').toLowerCase();
}
