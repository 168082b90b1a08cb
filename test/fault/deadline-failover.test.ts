import { describe, expect, it } from 'vitest';
import { deadlineFailover } from '../helpers/deadline-failover.js';

/**
 * Issue 41: a deadline is missed once, whatever leader changes happen. Two replicas share a
 * database and a --notify file; five runs whose deadlines fall around the moment the leader is
 * SIGKILLed all miss them (their task sleeps past). Each gets exactly one run.deadline_missed
 * event and one notification, delivered to a receiver on loopback, whichever replica marked it.
 */

const scenario = deadlineFailover('leoflow-deadline-failover-');

describe('deadlines across a leader SIGKILL', () => {
  it('each missed deadline is one event and one delivered notification', async () => {
    const { runIds, missed, told, got, survivor } = await scenario(
      (i, ms) =>
        `dag_id: late${i}\ndeadline: ${ms}ms\nnotify: [{ on: [deadline_missed], to: rx }]\n` +
        'tasks: [{ id: slow, command: ["sleep", "6"] }]\n',
      'run.deadline_missed',
    );
    expect(missed).toEqual(runIds.map((id) => ({ run_id: id, n: 1 })));
    expect(told.map((t) => [t.run_id, t.kind, t.state])).toEqual(
      runIds.map((id) => [id, 'deadline_missed', 'delivered']),
    );
    // Each reached the receiver; a second post of one (its replica killed mid-post) would carry its id.
    expect(new Set(got)).toEqual(new Set(told.map((t) => t.id)));
    expect(survivor.child.exitCode).toBeNull();
  }, 90_000);
});
