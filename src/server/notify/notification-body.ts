import type { DueNotification } from '../../db/notify-out/take-due-notifications.js';
import type { NotifyFormat } from '../config/read-notify-file.js';

/**
 * What a receiver is sent (docs/operations.md, "Notifications"): the run and its failed tasks as
 * JSON, with a one-line `text`; in the `slack` format only `{ text }`, what Slack's incoming
 * webhooks take.
 */
export function notificationBody(n: DueNotification, format: NotifyFormat): Record<string, unknown> {
  const text = summary(n);
  if (format === 'slack') return { text };
  return {
    id: n.id,
    kind: n.kind,
    dag_id: n.dag_id,
    run_id: n.run_id,
    run_key: n.run_key,
    state: n.run_state,
    logical_date: n.logical_date.toISOString(),
    started_at: n.started_at?.toISOString() ?? null,
    ended_at: n.ended_at?.toISOString() ?? null,
    deadline_at: n.deadline_at?.toISOString() ?? null,
    failed_tasks: n.failed_tasks,
    ...(n.kind === 'approval_requested' ? { task_id: n.task_id, approval: n.approval } : {}),
    // A task's missed deadline (`deadline:` on a task): the task, and deadline_at is its own.
    ...(n.kind === 'deadline_missed' && n.task_id !== '' ? { task_id: n.task_id } : {}),
    text,
  };
}

/** One line a person reads: the run, how it ended and, when it failed, which tasks. */
export function summary(n: DueNotification): string {
  const run = `Run ${n.run_id} of ${n.dag_id} (${n.run_key})`;
  if (n.kind === 'success') return `${run} succeeded`;
  if (n.kind === 'deadline_missed' && n.task_id !== '')
    return `${run}: task ${n.task_id} missed its deadline (${n.deadline_at?.toISOString() ?? '?'})`;
  if (n.kind === 'deadline_missed')
    return `${run} missed its deadline (${n.deadline_at?.toISOString() ?? '?'}): ${n.run_state} then`;
  if (n.kind === 'approval_requested') {
    const role = n.approval?.role ?? 'operator';
    const message = n.approval?.message ? `: ${firstLine(n.approval.message)}` : '';
    const how = `leoflow run approve ${n.run_id} ${n.task_id}`;
    return `${run} asks a token of role ${role} to approve task ${n.task_id}${message} (${how})`;
  }
  if (n.kind !== 'failed') return `${run}: ${n.kind}`;
  const failed = n.failed_tasks.filter((t) => t.state === 'failed');
  if (failed.length === 0) return `${run} failed`;
  const tasks = failed.map((t) => `${t.task_id} (try ${t.try_number}${t.error ? `: ${firstLine(t.error)}` : ''})`);
  return `${run} failed: ${tasks.join(', ')}`;
}

function firstLine(s: string): string {
  const line = s.split('\n', 1)[0]!;
  return line.length > 120 ? `${line.slice(0, 119)}…` : line;
}
