import { describe, expect, it } from 'vitest';
import type { CoreV1Event } from '@kubernetes/client-node';
import { latestWarning } from '../../src/executors/kubernetes/latest-warning.js';
import { isGenericPending } from '../../src/executors/kubernetes/pod-condition.js';

const ev = (type: string, reason: string, message: string, at: string, uid = 'u1'): CoreV1Event =>
  ({
    type,
    reason,
    message,
    lastTimestamp: new Date(at),
    involvedObject: { kind: 'Pod', name: 'p', uid },
    metadata: { name: `p.${reason}` },
  }) as CoreV1Event;

describe('latestWarning', () => {
  it('takes the latest Warning event of the pod, ignoring Normal ones and those of another pod of the same name', () => {
    const events = [
      ev('Warning', 'FailedScheduling', '0/3 nodes are available', '2026-01-01T00:00:01Z'),
      ev(
        'Warning',
        'FailedMount',
        'MountVolume.SetUp failed for volume "data"\n : configmap "c" not found',
        '2026-01-01T00:00:05Z',
      ),
      ev('Normal', 'Scheduled', 'Successfully assigned', '2026-01-01T00:00:09Z'),
      ev('Warning', 'FailedCreatePodSandBox', 'of an earlier pod', '2026-01-01T00:00:09Z', 'u0'),
    ];
    expect(latestWarning(events, 'u1')).toBe(
      'POD_PENDING:FailedMount:MountVolume.SetUp failed for volume "data" : configmap "c" not found',
    );
  });

  it('gives a tie (second-precision times) to the later listed, and null when there is no warning', () => {
    expect(
      latestWarning([ev('Warning', 'A', 'a', '2026-01-01T00:00:01Z'), ev('Warning', 'B', 'b', '2026-01-01T00:00:01Z')]),
    ).toBe('POD_PENDING:B:b');
    expect(latestWarning([ev('Normal', 'Pulling', 'pulling image', '2026-01-01T00:00:01Z')])).toBeNull();
    expect(latestWarning([])).toBeNull();
  });

  it('cuts a long message', () => {
    expect(latestWarning([ev('Warning', 'FailedMount', 'x'.repeat(5000), '2026-01-01T00:00:01Z')])!.length).toBe(
      'POD_PENDING:FailedMount:'.length + 300,
    );
  });
});

describe('isGenericPending', () => {
  it('is true for no reason and the bare ContainerCreating/PodInitializing, false for a reason with a message', () => {
    expect(isGenericPending(null)).toBe(true);
    expect(isGenericPending('POD_PENDING:ContainerCreating')).toBe(true);
    expect(isGenericPending('POD_PENDING:PodInitializing')).toBe(true);
    expect(isGenericPending('POD_PENDING:Unschedulable:0/3 nodes are available')).toBe(false);
    expect(isGenericPending('POD_PENDING:ContainerCreating:pulling')).toBe(false);
  });
});
