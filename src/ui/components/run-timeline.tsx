import { timestampDate } from '@bufbuild/protobuf/wkt';
import type { Run, TaskInstance } from '../../gen/leoflow/v1/types_pb.js';
import { taskStateName } from './state-badge.js';

/** Past this many started tasks the timeline is left out: the table says the same, row by row. */
const MAX_BARS = 200;

/**
 * Each started task's latest attempt as a bar from its start to its end (or now), on the run's
 * time from its start: what ran in parallel, and what took the time.
 */
export function RunTimeline({ run, tis }: { run: Run; tis: TaskInstance[] }) {
  const started = tis.filter((t) => t.startedAt);
  if (started.length === 0 || started.length > MAX_BARS || !run.startedAt) return null;
  const t0 = timestampDate(run.startedAt).getTime();
  const end = (t: TaskInstance) => (t.endedAt ? timestampDate(t.endedAt).getTime() : Date.now());
  const t1 = Math.max(t0 + 1, run.endedAt ? timestampDate(run.endedAt).getTime() : 0, ...started.map(end));
  const span = t1 - t0;
  return (
    <div className="timeline" aria-label="timeline of attempts">
      {started.map((t) => {
        const from = timestampDate(t.startedAt!).getTime() - t0;
        const left = (100 * Math.max(0, from)) / span;
        const width = Math.max(0.5, (100 * (end(t) - t0 - from)) / span);
        return (
          <div key={t.taskId} className="lane">
            <span className="lane-name clip">{t.taskId}</span>
            <span className="lane-track">
              <span
                className={`bar s-${taskStateName(t.state)}`}
                style={{ left: `${left}%`, width: `${Math.min(width, 100 - left)}%` }}
                title={`${t.taskId}: try ${t.tryNumber}, ${((end(t) - t0 - from) / 1000).toFixed(1)} s`}
              />
            </span>
          </div>
        );
      })}
      <div className="lane axis">
        <span className="lane-name" />
        <span className="lane-track">
          <span>0 s</span>
          <span>{(span / 1000).toFixed(1)} s</span>
        </span>
      </div>
    </div>
  );
}
