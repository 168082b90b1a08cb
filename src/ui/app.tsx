import { useCallback, useEffect, useState } from 'react';
import { AccessContext } from './auth/access-context.js';
import { detectRole, type Access } from './auth/detect-role.js';
import { saveToken } from './auth/token-store.js';
import { TokenForm } from './auth/token-form.js';
import { Link } from './components/link.js';
import { useRoute } from './live/use-route.js';
import { DagsPage } from './pages/dags-page.js';
import { FleetPage } from './pages/fleet-page.js';
import { RunPage } from './pages/run-page.js';
import { RunsPage } from './pages/runs-page.js';
import { TaskPage } from './pages/task-page.js';

/**
 * The dashboard: the page the path names, drawn at once (its data asked for while WhoAmI is: no round
 * trip waits for another), or a token form when the server wants a token it was not given.
 */
export function App() {
  const [access, setAccess] = useState<Access | null>(null);
  const [failure, setFailure] = useState<string | null>(null);
  const check = useCallback(() => {
    detectRole()
      .then((a) => {
        setAccess(a);
        setFailure(null);
      })
      .catch((err: Error) => setFailure(err.message));
  }, []);
  useEffect(check, [check]);
  const url = useRoute();
  const signOut = () => {
    saveToken(null);
    check();
  };
  return (
    <div className="shell">
      <header className="top">
        <Link to="/" className="brand">
          Leoflow
        </Link>
        <nav>
          <Link to="/" className={navClass(url, '/')}>
            DAGs
          </Link>
          <Link to="/runs" className={navClass(url, '/runs')}>
            Runs
          </Link>
          <Link to="/fleet" className={navClass(url, '/fleet')}>
            Fleet
          </Link>
        </nav>
        {access?.kind === 'ready' && (
          <span className="who" data-testid="role">
            {access.open ? 'open API · ' : ''}role {access.role}
            {!access.open && (
              <button className="link" onClick={signOut}>
                sign out
              </button>
            )}
          </span>
        )}
      </header>
      <main>
        {failure && <p className="error">The API did not answer: {failure}</p>}
        {access?.kind === 'needs-token' && <TokenForm message={access.message} onSaved={check} />}
        {access?.kind === 'ready' && access.readOnly && (
          <p className="read-only" data-testid="read-only">
            {access.readOnly}
          </p>
        )}
        {/* One place in the tree whether WhoAmI has answered or not: the page is not drawn (and its data
            asked for) twice. Meanwhile its write buttons are disabled (known: false). */}
        {(access?.kind === 'ready' || (access === null && !failure)) && (
          <AccessContext.Provider
            value={
              access?.kind === 'ready'
                ? { role: access.role, readOnly: access.readOnly, known: true }
                : { role: 'viewer', readOnly: null, known: false }
            }
          >
            <Page url={url} />
          </AccessContext.Provider>
        )}
      </main>
    </div>
  );
}

function navClass(url: URL, prefix: string): string {
  const p = url.pathname;
  const on = prefix === '/' ? p === '/' : p.startsWith(prefix);
  return on ? 'on' : '';
}

function Page({ url }: { url: URL }) {
  const parts = url.pathname.split('/').filter(Boolean).map(decodeURIComponent);
  if (parts[0] === 'runs' && parts[1] && parts[2] === 'tasks' && parts[3])
    return <TaskPage key={`${parts[1]}/${parts[3]}`} runId={parts[1]} taskId={parts[3]} />;
  if (parts[0] === 'runs' && parts[1]) return <RunPage key={parts[1]} runId={parts[1]} />;
  if (parts[0] === 'runs') return <RunsPage query={url.searchParams} />;
  if (parts[0] === 'fleet') return <FleetPage />;
  if (parts.length === 0) return <DagsPage />;
  return <p className="error">No page at {url.pathname}.</p>;
}
