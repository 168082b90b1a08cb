import type { TaskTry } from '../live/task-tries.js';
import { StateBadge } from './state-badge.js';

/** Every try of a task: state, exit code or killing signal, duration, where it ran and its error. */
export function TriesTable({ tries }: { tries: TaskTry[] }) {
  if (tries.length === 0) return <p className="muted">No try has started yet.</p>;
  return (
    <div className="table-wrap">
      <table data-testid="tries">
        <thead>
          <tr>
            <th>Try</th>
            <th>State</th>
            <th className="right">Exit / signal</th>
            <th className="right">Duration</th>
            <th>Ran on</th>
            <th>Error</th>
          </tr>
        </thead>
        <tbody>
          {tries.map((t) => (
            <tr key={t.tryNumber}>
              <td>{t.tryNumber}</td>
              <td>
                <StateBadge state={t.state} />
              </td>
              <td className="right mono" data-testid="try-exit">
                {t.signal || (t.exitCode ?? '—')}
              </td>
              <td className="right">{duration(t)}</td>
              <td className="mono">
                {t.agentId || 'this server'}
                {t.pid !== null && <span className="muted"> · pid {t.pid}</span>}
              </td>
              <td className="error-text clip">{t.error}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

function duration(t: TaskTry): string {
  if (!t.startedAt) return '—';
  const ms = (t.endedAt ?? new Date()).getTime() - t.startedAt.getTime();
  return ms < 1_000 ? `${Math.max(0, ms)} ms` : `${(ms / 1_000).toFixed(1)} s`;
}
