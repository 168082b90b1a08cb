import type { Duration } from '@bufbuild/protobuf/wkt';

/** The fields of an Assign that the agent runtime tests give an agent (see `agentJobs`). */
export interface AgentJob {
  attempt: { tiId: string; tryNumber: number; attemptToken: string };
  dagId: string;
  runId: string;
  taskId: string;
  maxTries: number;
  command: string[];
  timeout?: Duration;
}

/**
 * A maker of jobs for an agent: each a first try of a TI of its own, numbered from `firstTi` (a
 * file picks its own range, so ids never repeat between its tests), with `command` and `extra`.
 */
export function agentJobs(firstTi: number): (command: string[], extra?: Partial<AgentJob>) => AgentJob {
  let nextTi = firstTi;
  return (command, extra = {}) => {
    const ti = String(nextTi++);
    return {
      attempt: { tiId: ti, tryNumber: 1, attemptToken: `tok-${ti}` },
      dagId: 'd',
      runId: '1',
      taskId: `t${ti}`,
      maxTries: 1,
      command,
      ...extra,
    };
  };
}
