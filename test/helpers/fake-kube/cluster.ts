import type { EventRecorder } from './event-recorder.js';
import type { FakeKubelet } from './fake-kubelet.js';
import type { FakeScheduler } from './fake-scheduler.js';
import type { ObjectStore } from './object-store.js';

/** The fake's control plane behind its API: what the pod and node handlers act on. */
export interface Cluster {
  readonly store: ObjectStore;
  readonly recorder: EventRecorder;
  /** Undefined with the 'manual' kubelet: nothing is scheduled unless the test says so. */
  readonly scheduler: FakeScheduler | undefined;
  readonly kubelet: FakeKubelet;
  /** The 'manual' kubelet: a graceful delete ends by a timer, not by a kubelet stopping processes. */
  readonly manual: boolean;
  /** Nodes lost by loseNodeAsCurrent: a graceful delete of their pods is never confirmed. */
  readonly lostNodes: Set<string>;
  /** Timers of the fake's own controllers (grace periods, the node controller), cleared at close. */
  readonly timers: Set<NodeJS.Timeout>;
}
