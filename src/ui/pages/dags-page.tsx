import { Fragment, useCallback, useEffect, useState } from 'react';
import type { Dag } from '../../gen/leoflow/v1/types_pb.js';
import { workflow } from '../api/clients.js';
import { useCan, useWhyNot } from '../auth/access-context.js';
import { Link } from '../components/link.js';
import { RunStrip, type StripRun } from '../components/run-strip.js';
import { runStateName } from '../components/state-badge.js';
import { TimeText } from '../components/time-text.js';
import { payloadOf, useEventStream } from '../live/use-event-stream.js';
import { TriggerForm } from './trigger-form.js';

const STRIP = 12;

/** Every DAG: schedule, next run, paused, its last runs (live from WatchRuns); pause and trigger. */
export function DagsPage() {
  const [dags, setDags] = useState<Dag[] | null>(null);
  const [strips, setStrips] = useState<Record<string, StripRun[]>>({});
  const [open, setOpen] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
  const canOperate = useCan('operator');
  const whyNot = useWhyNot('operator');
  const load = useCallback(async () => {
    try {
      const res = await workflow.listDags({});
      setDags(res.dags);
      const lists = await Promise.all(res.dags.map((d) => workflow.listRuns({ dagId: d.dagId, limit: STRIP })));
      setStrips((old) => {
        const next = { ...old };
        res.dags.forEach((d, i) => {
          const fresh = lists[i]!.runs.map((r) => ({ runId: r.runId, state: runStateName(r.state) }));
          next[d.dagId] = mergeRuns(old[d.dagId] ?? [], fresh);
        });
        return next;
      });
    } catch (err) {
      setError((err as Error).message);
    }
  }, []);
  useEffect(() => void load(), [load]);
  useEventStream(
    'dags',
    (afterSeq, signal) => workflow.watchRuns({ afterSeq }, { signal }),
    (events) => {
      if (events.some((e) => e.kind === 'dag.applied')) void load();
      const moves = events.filter((e) => e.kind === 'run.state' && e.tiId === '0');
      if (moves.length === 0) return;
      setStrips((old) => {
        const next = { ...old };
        for (const e of moves) {
          const to = String(payloadOf(e).to ?? '');
          next[e.dagId] = mergeRuns(next[e.dagId] ?? [], [{ runId: e.runId, state: to }]);
        }
        return next;
      });
    },
  );
  const pause = (dag: Dag) =>
    workflow
      .pauseDag({ dagId: dag.dagId, paused: !dag.paused })
      .then((res) => setDags((ds) => ds?.map((d) => (d.dagId === dag.dagId ? res.dag! : d)) ?? null))
      .catch((err: Error) => setError(err.message));
  if (error) return <p className="error">{error}</p>;
  if (!dags) return <p className="muted">Loading…</p>;
  return (
    <section>
      <h1>DAGs</h1>
      {dags.length === 0 && <p className="muted">No DAGs yet: apply one with `leoflow dag apply FILE`.</p>}
      <div className="table-wrap">
        <table className="dags">
          <thead>
            <tr>
              <th>DAG</th>
              <th>Schedule</th>
              <th>Next run</th>
              <th>Last runs</th>
              <th className="right">Actions</th>
            </tr>
          </thead>
          <tbody>
            {dags.map((d) => (
              <Fragment key={d.dagId}>
                <tr data-dag={d.dagId}>
                  <td>
                    <Link to={`/runs?dag=${encodeURIComponent(d.dagId)}`} className="strong">
                      {d.dagId}
                    </Link>
                    {d.paused && <span className="badge s-paused">paused</span>}
                    {d.description && <div className="muted small clip">{d.description}</div>}
                  </td>
                  <td className="mono">{d.schedule || <span className="muted">manual</span>}</td>
                  <td>{d.paused ? <span className="muted">paused</span> : <TimeText at={d.nextRunAt} />}</td>
                  <td>
                    <RunStrip runs={strips[d.dagId] ?? []} />
                  </td>
                  <td className="right nowrap">
                    <button title={whyNot} disabled={!canOperate} onClick={() => void pause(d)}>
                      {d.paused ? 'Unpause' : 'Pause'}
                    </button>
                    <button
                      title={whyNot}
                      disabled={!canOperate}
                      onClick={() => setOpen(open === d.dagId ? null : d.dagId)}
                    >
                      Trigger…
                    </button>
                  </td>
                </tr>
                {open === d.dagId && (
                  <tr className="detail">
                    <td colSpan={5}>
                      <TriggerForm dagId={d.dagId} onClose={() => setOpen(null)} />
                    </td>
                  </tr>
                )}
              </Fragment>
            ))}
          </tbody>
        </table>
      </div>
    </section>
  );
}

/** A strip with `fresh` runs put in (a known run takes its new state), newest first, the last STRIP. */
function mergeRuns(old: StripRun[], fresh: StripRun[]): StripRun[] {
  const byId = new Map(old.map((r) => [r.runId, r]));
  for (const r of fresh) byId.set(r.runId, r);
  return [...byId.values()].sort((a, b) => (BigInt(b.runId) > BigInt(a.runId) ? 1 : -1)).slice(0, STRIP);
}
