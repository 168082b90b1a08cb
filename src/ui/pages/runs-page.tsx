import { timestampFromDate } from '@bufbuild/protobuf/wkt';
import { useCallback, useEffect, useState } from 'react';
import { RunState, type Run } from '../../gen/leoflow/v1/types_pb.js';
import { workflow } from '../api/clients.js';
import { Link } from '../components/link.js';
import { StateBadge, runStateName } from '../components/state-badge.js';
import { TimeText, durationText } from '../components/time-text.js';
import { payloadOf, useEventStream } from '../live/use-event-stream.js';
import { navigate } from '../live/use-route.js';

const PAGE = 25;
const STATES = ['queued', 'running', 'success', 'failed', 'cancelled'];

/** A `yyyy-mm-dd` of a date input, as that day's local midnight (plus `days`); undefined when empty. */
function localDay(value: string, days = 0): Date | undefined {
  const m = /^(\d{4})-(\d{2})-(\d{2})$/.exec(value);
  return m ? new Date(Number(m[1]), Number(m[2]) - 1, Number(m[3]) + days) : undefined;
}

/**
 * Runs, filtered by DAG, state and creation date (server-side), a page at a time; new runs and
 * moves appear live (WatchRuns, from the seq the first page was read at, not from the start).
 */
export function RunsPage({ query }: { query: URLSearchParams }) {
  const dag = query.get('dag') ?? '';
  const state = query.get('state') ?? '';
  const page = query.get('page') ?? '';
  const from = query.get('from') ?? '';
  const to = query.get('to') ?? '';
  // Where the watch starts: the feed's seq when this DAG's runs were first read.
  const [watchFrom, setWatchFrom] = useState<{ dag: string; seq: string } | null>(null);
  const [runs, setRuns] = useState<Run[] | null>(null);
  const [next, setNext] = useState('');
  const [error, setError] = useState<string | null>(null);
  const [dagIds, setDagIds] = useState<string[]>([]);
  const states = state ? [RunState[state.toUpperCase() as keyof typeof RunState]] : [];
  const load = useCallback(() => {
    workflow
      .listRuns({
        dagId: dag,
        states,
        limit: PAGE,
        pageToken: page,
        createdFrom: localDay(from) && timestampFromDate(localDay(from)!),
        // The "to" day is included: before the next day's midnight.
        createdTo: localDay(to, 1) && timestampFromDate(localDay(to, 1)!),
        withWatchSeq: true,
      })
      .then((res) => {
        setWatchFrom((w) => (w?.dag === dag ? w : { dag, seq: res.watchSeq }));
        setRuns(res.runs);
        setNext(res.nextPageToken);
        setError(null);
      })
      .catch((err: Error) => setError(err.message));
  }, [dag, state, page, from, to]);
  useEffect(load, [load]);
  useEffect(() => {
    workflow.listDags({}).then(
      (res) => setDagIds(res.dags.map((d) => d.dagId)),
      () => undefined,
    );
  }, []);
  useEventStream(
    `runs/${dag}`,
    (afterSeq, signal) => workflow.watchRuns({ dagId: dag, afterSeq }, { signal }),
    (events) => {
      const moves = events.filter((e) => e.kind === 'run.state' && e.tiId === '0');
      if (moves.length === 0) return;
      setRuns((old) => {
        if (!old) return old;
        const known = new Set(old.map((r) => r.runId));
        const newest = old[0] ? BigInt(old[0].runId) : 0n;
        // A run newer than the page's newest, on the first page: read it and put it on top.
        if (!page && !to && moves.some((e) => !known.has(e.runId) && BigInt(e.runId) > newest)) load();
        return old.map((r) => {
          const last = moves.filter((e) => e.runId === r.runId).at(-1);
          if (!last) return r;
          const to = String(payloadOf(last).to ?? '').toUpperCase() as keyof typeof RunState;
          return { ...r, state: RunState[to] ?? r.state };
        });
      });
    },
    watchFrom?.dag === dag ? watchFrom.seq : null,
  );
  const go = (changes: Record<string, string>) => {
    const q = new URLSearchParams({ dag, state, from, to, page, ...changes });
    for (const [k, v] of [...q.entries()]) if (!v) q.delete(k);
    const s = q.toString();
    navigate(`/runs${s ? `?${s}` : ''}`);
  };
  return (
    <section>
      <h1>Runs</h1>
      <div className="filters">
        <label>
          DAG
          <select value={dag} onChange={(e) => go({ dag: e.target.value, page: '' })} aria-label="DAG">
            <option value="">all</option>
            {dagIds.map((d) => (
              <option key={d}>{d}</option>
            ))}
          </select>
        </label>
        <label>
          State
          <select value={state} onChange={(e) => go({ state: e.target.value, page: '' })} aria-label="state">
            <option value="">all</option>
            {STATES.map((s) => (
              <option key={s}>{s}</option>
            ))}
          </select>
        </label>
        <label>
          From
          <input
            type="date"
            value={from}
            max={to || undefined}
            aria-label="from"
            onChange={(e) => go({ from: e.target.value, page: '' })}
          />
        </label>
        <label>
          To
          <input
            type="date"
            value={to}
            min={from || undefined}
            aria-label="to"
            onChange={(e) => go({ to: e.target.value, page: '' })}
          />
        </label>
      </div>
      {error && <p className="error">{error}</p>}
      {runs && runs.length === 0 && <p className="muted">No runs.</p>}
      {runs && runs.length > 0 && (
        <div className="table-wrap">
          <table>
            <thead>
              <tr>
                <th>Run</th>
                <th>DAG</th>
                <th>State</th>
                <th>Type</th>
                <th>Created</th>
                <th className="right">Duration</th>
              </tr>
            </thead>
            <tbody>
              {runs.map((r) => (
                <tr key={r.runId} data-run={r.runId}>
                  <td>
                    <Link to={`/runs/${r.runId}`} className="strong">
                      #{r.runId}
                    </Link>
                    <div className="muted small clip">{r.runKey}</div>
                  </td>
                  <td>{r.dagId}</td>
                  <td>
                    <StateBadge state={runStateName(r.state)} />
                  </td>
                  <td>{r.runType}</td>
                  <td>
                    <TimeText at={r.createdAt} />
                  </td>
                  <td className="right">{durationText(r.startedAt, r.endedAt)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      <div className="pager">
        <button disabled={!page} onClick={() => go({ page: '' })}>
          Newest
        </button>
        <button disabled={!next} onClick={() => go({ page: next })}>
          Older →
        </button>
      </div>
    </section>
  );
}
