import { create } from '@bufbuild/protobuf';
import { durationFromMs, type Duration } from '@bufbuild/protobuf/wkt';
import { describe, expect, it } from 'vitest';
import { attemptFromAssign } from '../../src/agent/attempt-messages.js';
import { AssignSchema } from '../../src/gen/leoflow/v1/agent_pb.js';

function assign(over: { killGrace?: Duration } = {}) {
  return create(AssignSchema, {
    attempt: { tiId: '7', tryNumber: 2, attemptToken: '5b0c5a9e-3f0e-4b8e-9a57-2f4c1c1f0d11' },
    dagId: 'etl',
    runId: '3',
    taskId: 'load',
    maxTries: 3,
    command: ['true'],
    ...over,
  });
}

describe('attemptFromAssign', () => {
  it("takes the control plane's kill grace when the Assign carries one, zero included", () => {
    expect(attemptFromAssign(assign({ killGrace: durationFromMs(500) })).killGraceMs).toBe(500);
    expect(attemptFromAssign(assign({ killGrace: durationFromMs(0) })).killGraceMs).toBe(0);
  });

  it('leaves it unset for an older control plane, so the agent uses its own', () => {
    expect(attemptFromAssign(assign()).killGraceMs).toBeUndefined();
  });
});
