import { useMemo, useState } from 'react';
import type { TaskSpec } from '../../gen/leoflow/v1/types_pb.js';
import { workflow } from '../api/clients.js';
import { useCan, useWhyNot } from '../auth/access-context.js';
import { Link } from '../components/link.js';
import { pendingReasonText } from '../components/pending-reason.js';
import { RunGraph } from '../components/run-graph.js';
import { RunTimeline } from '../components/run-timeline.js';
import { StateBadge, runStateName, taskStateName } from '../components/state-badge.js';
import { TimeText, durationText } from '../components/time-text.js';
import { useVisibleRows } from '../components/use-visible-rows.js';
import { useRunLive } from '../live/use-run-live.js';

/** Past this many tasks the table draws only the rows in view (a fixed row height, a scroll box). */
const VIRTUAL_ROWS_FROM = 200;
const ROW_H = 41;
const TABLE_H = 600;

const ENDED = new Set(['success', 'failed', 'cancelled']);

/** A run: its DAG as a live graph, its tasks with why each waits, and cancel / clear. */
export function RunPage({ runId }: { runId: string }) {
  const [tasks, setTasks] = useState<TaskSpec[] | null>(null);
  // The DAG is asked for the moment the run's first read names it, not after that read is drawn.
  const { view, error, reload } = useRunLive(runId, undefined, (run) =>
    workflow.getDag({ dagId: run.dagId }).then(
      (res) => setTasks(res.dag?.tasks ?? []),
      () => setTasks([]),
    ),
  );
  const [actionError, setActionError] = useState<string | null>(null);
  const canOperate = useCan('operator');
  const whyNot = useWhyNot('operator');
  const states = useMemo(() => new Map(view?.tis.map((t) => [t.taskId, taskStateName(t.state)])), [view]);
  // Tasks a graph can draw: the DAG's (its current version); else the run's own task ids alone. Not
  // drawn before GetDag answers: boxes without their edges, laid out again a moment later, cost a
  // second layout and draw of every box (a 500-task run's) for a graph that is wrong meanwhile.
  const taskIds = view?.tis.map((t) => t.taskId).join('\n') ?? '';
  const drawn = useMemo(
    () =>
      tasks === null
        ? null
        : tasks.length > 0
          ? tasks
          : taskIds
              .split('\n')
              .filter(Boolean)
              .map((id) => ({ id, dependsOn: [] as string[] }) as TaskSpec),
    [tasks, taskIds],
  );
  const count = view?.tis.length ?? 0;
  const virtual = count > VIRTUAL_ROWS_FROM;
  const rows = useVisibleRows(count, ROW_H, TABLE_H);
  if (error && !view) return <p className="error">{error}</p>;
  if (!view) return <p className="muted">Loading…</p>;
  const { run, tis } = view;
  const runState = runStateName(run.state);
  const act = (question: string, call: () => Promise<unknown>) => {
    if (!window.confirm(question)) return;
    call().then(
      () => {
        setActionError(null);
        reload();
      },
      (err: Error) => setActionError(err.message),
    );
  };
  return (
    <section>
      <div className="title-row">
        <h1>
          Run #{run.runId} <StateBadge state={runState} />
        </h1>
        <button
          className="danger"
          title={whyNot}
          disabled={!canOperate || ENDED.has(runState)}
          onClick={() => act(`Cancel run #${run.runId} of ${run.dagId}?`, () => workflow.cancelRun({ runId }))}
        >
          Cancel run
        </button>
      </div>
      <dl className="facts">
        <dt>DAG</dt>
        <dd>
          <Link to={`/runs?dag=${encodeURIComponent(run.dagId)}`}>{run.dagId}</Link>
        </dd>
        <dt>Key</dt>
        <dd className="mono clip">{run.runKey}</dd>
        <dt>Created</dt>
        <dd>
          <TimeText at={run.createdAt} />
        </dd>
        <dt>Duration</dt>
        <dd>{durationText(run.startedAt, run.endedAt)}</dd>
        {run.deadlineAt && (
          <>
            <dt>Deadline</dt>
            <dd data-testid="deadline">
              <TimeText at={run.deadlineAt} />
              {run.deadlineState === 'missed' && <StateBadge state="missed" />}
            </dd>
          </>
        )}
        {run.confJson && run.confJson !== '{}' && (
          <>
            <dt>Conf</dt>
            <dd className="mono clip">{run.confJson}</dd>
          </>
        )}
      </dl>
      {actionError && <p className="error">{actionError}</p>}
      {drawn ? (
        <RunGraph runId={runId} tasks={drawn} states={states} />
      ) : (
        <div className="graph-wrap">
          <p className="muted small note">Loading the graph…</p>
        </div>
      )}
      <RunTimeline run={run} tis={tis} />
      <div
        className={virtual ? 'table-wrap virtual-rows' : 'table-wrap'}
        style={virtual ? { maxHeight: TABLE_H, overflowY: 'auto' } : undefined}
        onScroll={virtual ? rows.onScroll : undefined}
      >
        <table>
          <thead>
            <tr>
              <th>Task</th>
              <th>State</th>
              <th>Try</th>
              <th>Duration</th>
              <th>Waiting because</th>
              <th className="right">Actions</th>
            </tr>
          </thead>
          <tbody>
            {virtual && rows.padTop > 0 && <tr style={{ height: rows.padTop }} aria-hidden="true" />}
            {(virtual ? tis.slice(rows.first, rows.last) : tis).map((t) => {
              const s = taskStateName(t.state);
              const ended = ['success', 'failed', 'upstream_failed', 'skipped', 'cancelled'].includes(s);
              // An approval task waiting for a person: approved or rejected here (ApproveTask).
              const asks = s === 'waiting' && t.pendingReason.startsWith('WAITING_FOR_APPROVAL');
              return (
                <tr key={t.taskId} data-task-row={t.taskId}>
                  <td>
                    <Link to={`/runs/${runId}/tasks/${encodeURIComponent(t.taskId)}`} className="strong">
                      {t.taskId}
                    </Link>
                  </td>
                  <td>
                    <StateBadge state={s} />
                    {/* A task past its own deadline (`deadline:` on the task). */}
                    {t.deadlineState === 'missed' && <StateBadge state="missed" />}
                  </td>
                  <td>{t.tryNumber > 0 ? `${t.tryNumber}/${t.maxTries}` : '—'}</td>
                  <td>{durationText(t.startedAt, t.endedAt)}</td>
                  <td className="muted">{pendingReasonText(t.pendingReason)}</td>
                  <td className="right nowrap">
                    {asks && (
                      <>
                        <button
                          title={whyNot}
                          disabled={!canOperate}
                          onClick={() =>
                            act(`Approve task ${t.taskId}? It succeeds, and the run goes on.`, () =>
                              workflow.approveTask({ runId, taskId: t.taskId, reject: false, note: '' }),
                            )
                          }
                        >
                          Approve
                        </button>
                        <button
                          className="danger"
                          title={whyNot}
                          disabled={!canOperate}
                          onClick={() =>
                            act(`Reject task ${t.taskId}? It fails.`, () =>
                              workflow.approveTask({ runId, taskId: t.taskId, reject: true, note: '' }),
                            )
                          }
                        >
                          Reject
                        </button>
                      </>
                    )}
                    <button
                      title={whyNot}
                      disabled={!canOperate || ended}
                      onClick={() =>
                        act(`Cancel task ${t.taskId}?`, () => workflow.cancelTaskInstance({ runId, taskId: t.taskId }))
                      }
                    >
                      Cancel
                    </button>
                    <button
                      title={whyNot}
                      disabled={!canOperate || !ended}
                      onClick={() =>
                        act(`Clear task ${t.taskId} and its downstream tasks? They run again.`, () =>
                          workflow.clearTaskInstance({ runId, taskId: t.taskId, downstream: true }),
                        )
                      }
                    >
                      Clear
                    </button>
                  </td>
                </tr>
              );
            })}
            {virtual && rows.padBottom > 0 && <tr style={{ height: rows.padBottom }} aria-hidden="true" />}
          </tbody>
        </table>
      </div>
    </section>
  );
}
