import { useCallback, useState } from 'react';
import type { RunEvent } from '../../gen/leoflow/v1/workflow_pb.js';
import { workflow } from '../api/clients.js';
import { useCan, useWhyNot } from '../auth/access-context.js';
import { Link } from '../components/link.js';
import { CopyButton } from '../components/copy-button.js';
import { LogView } from '../components/log-view.js';
import { pendingReasonText } from '../components/pending-reason.js';
import { StateBadge, taskStateName } from '../components/state-badge.js';
import { TaskOutputs } from '../components/task-outputs.js';
import { TimeText, durationText } from '../components/time-text.js';
import { TriesTable } from '../components/tries-table.js';
import { applyTryEvents, type TaskTry } from '../live/task-tries.js';
import { useRunLive } from '../live/use-run-live.js';

/**
 * A task instance: its latest try, every try (exit code or signal, duration, agent, error), live;
 * each try's output; its log followed.
 */
export function TaskPage({ runId, taskId }: { runId: string; taskId: string }) {
  const [tries, setTries] = useState<TaskTry[]>([]);
  const onEvents = useCallback(
    (events: RunEvent[]) => setTries((old) => applyTryEvents(old, taskId, events)),
    [taskId],
  );
  const { view, error, reload } = useRunLive(runId, onEvents);
  const canOperate = useCan('operator');
  const whyNot = useWhyNot('operator');
  const ti = view?.tis.find((t) => t.taskId === taskId);
  if (error && !view) return <p className="error">{error}</p>;
  if (!view) return <p className="muted">Loading…</p>;
  if (!ti)
    return (
      <p className="error">
        Run #{runId} has no task {taskId}.
      </p>
    );
  const state = taskStateName(ti.state);
  const cancel = () => {
    if (!window.confirm(`Cancel task ${taskId}?`)) return;
    workflow.cancelTaskInstance({ runId, taskId }).then(reload, (err: Error) => window.alert(err.message));
  };
  return (
    <section>
      <div className="title-row">
        <h1>
          {taskId} <StateBadge state={state} />
        </h1>
        <button
          className="danger"
          title={whyNot}
          disabled={!canOperate || !['none', 'scheduled', 'queued', 'running', 'up_for_retry'].includes(state)}
          onClick={cancel}
        >
          Cancel task
        </button>
      </div>
      <dl className="facts">
        <dt>Run</dt>
        <dd>
          <Link to={`/runs/${runId}`}>
            #{runId} ({view.run.dagId})
          </Link>
        </dd>
        <dt>Try</dt>
        <dd>{ti.tryNumber > 0 ? `${ti.tryNumber} of ${ti.maxTries}` : 'not started'}</dd>
        <dt>{ti.signal ? 'Signal' : 'Exit code'}</dt>
        <dd data-testid="exit-code">{ti.signal ? `killed by ${ti.signal}` : (ti.exitCode ?? '—')}</dd>
        <dt>Duration</dt>
        <dd>{durationText(ti.startedAt, ti.endedAt)}</dd>
        <dt>Started</dt>
        <dd>
          <TimeText at={ti.startedAt} />
        </dd>
        <dt>Executor</dt>
        <dd>
          {ti.executor || '—'}
          {ti.agentId && ` on ${ti.agentId}`}
        </dd>
        <dt>Ids</dt>
        <dd className="mono">
          ti {ti.tiId} <CopyButton text={ti.tiId} label="task instance id" /> · run {runId}{' '}
          <CopyButton text={runId} label="run id" />
        </dd>
        {view.run.traceparent && (
          <>
            <dt>Trace</dt>
            <dd className="mono">
              <span className="clip inline">{view.run.traceparent}</span>
              <CopyButton text={view.run.traceparent} label="traceparent" />
            </dd>
          </>
        )}
        {ti.deadlineAt && (
          <>
            <dt>Deadline</dt>
            <dd data-testid="task-deadline">
              <TimeText at={ti.deadlineAt} />
              {ti.deadlineState === 'missed' && <StateBadge state="missed" />}
            </dd>
          </>
        )}
        {ti.pendingReason && (
          <>
            <dt>Waiting</dt>
            <dd>{pendingReasonText(ti.pendingReason)}</dd>
          </>
        )}
        {ti.error && (
          <>
            <dt>Error</dt>
            <dd className="error-text">{ti.error}</dd>
          </>
        )}
      </dl>
      <h2>Tries</h2>
      <TriesTable tries={tries} />
      <TaskOutputs
        runId={runId}
        taskId={taskId}
        endedKey={tries.map((t) => `${t.tryNumber}:${t.endedAt ? t.state : ''}`).join(',')}
      />
      <LogView runId={runId} taskId={taskId} />
    </section>
  );
}
