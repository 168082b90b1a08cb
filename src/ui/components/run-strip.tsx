import { Link } from './link.js';

export interface StripRun {
  runId: string;
  state: string;
}

/** A DAG's last runs, oldest to newest, one square each in its state's colour. */
export function RunStrip({ runs }: { runs: StripRun[] }) {
  if (runs.length === 0) return <span className="muted">no runs</span>;
  return (
    <span className="strip">
      {[...runs].reverse().map((r) => (
        <Link key={r.runId} to={`/runs/${r.runId}`} className={`cell s-${r.state}`}>
          <span className="sr">{`run ${r.runId}: ${r.state}`}</span>
        </Link>
      ))}
    </span>
  );
}
