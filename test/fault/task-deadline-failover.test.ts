import { describe, expect, it } from 'vitest';
import { deadlineFailover } from '../helpers/deadline-failover.js';

/**
 * Issue 41: a task's deadline is missed once, whatever leader changes happen, as a run's is
 * (deadline-failover.test.ts). Two replicas share a database and a --notify file; five tasks whose
 * deadlines fall around the moment the leader is SIGKILLed all miss them (they sleep past). Each
 * gets exactly one task.deadline_missed event and one notification, delivered to a receiver on
 * loopback, whichever replica marked it.
 */

const scenario = deadlineFailover('leoflow-task-deadline-failover-');

describe('task deadlines across a leader SIGKILL', () => {
  it('each missed task deadline is one event and one delivered notification', async () => {
    const { runIds, missed, told, got, survivor } = await scenario(
      (i, ms) =>
        `dag_id: late${i}\nnotify: [{ on: [deadline_missed], to: rx }]\n` +
        `tasks: [{ id: slow, command: ["sleep", "6"], deadline: ${ms}ms }]\n`,
      'task.deadline_missed',
    );
    expect(missed).toEqual(runIds.map((id) => ({ run_id: id, n: 1 })));
    expect(told.map((t) => [t.run_id, t.kind, t.task_id, t.state])).toEqual(
      runIds.map((id) => [id, 'deadline_missed', 'slow', 'delivered']),
    );
    // Each reached the receiver; a second post of one (its replica killed mid-post) would carry its id.
    expect(new Set(got)).toEqual(new Set(told.map((t) => t.id)));
    expect(survivor.child.exitCode).toBeNull();
  }, 90_000);
});
