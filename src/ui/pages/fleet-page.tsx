import { useCallback, useEffect, useState } from 'react';
import { AgentHealth, type Agent, type GetHealthResponse } from '../../gen/leoflow/v1/cluster_pb.js';
import { cluster } from '../api/clients.js';
import { useCan } from '../auth/access-context.js';
import { TimeText } from '../components/time-text.js';

/** How often the fleet is read again: agents have no watch stream; one read for the whole page. */
const REFRESH_MS = 5_000;

/** Agents (labels, slots, running, health; drain and undrain), replicas and the leader. */
export function FleetPage() {
  const [agents, setAgents] = useState<Agent[] | null>(null);
  const [health, setHealth] = useState<GetHealthResponse | null>(null);
  const [error, setError] = useState<string | null>(null);
  const canOperate = useCan('operator');
  const load = useCallback(() => {
    Promise.all([cluster.listAgents({}), cluster.getHealth({})])
      .then(([a, h]) => {
        setAgents(a.agents);
        setHealth(h);
        setError(null);
      })
      .catch((err: Error) => setError(err.message));
  }, []);
  useEffect(() => {
    load();
    const t = setInterval(load, REFRESH_MS);
    return () => clearInterval(t);
  }, [load]);
  const drain = (a: Agent) =>
    cluster.drainAgent({ agentId: a.agentId, undrain: a.draining }).then(load, (err: Error) => setError(err.message));
  return (
    <section>
      <h1>Fleet</h1>
      {error && <p className="error">{error}</p>}
      <h2>Replicas</h2>
      {health && (
        <div className="table-wrap">
          <table>
            <thead>
              <tr>
                <th>Replica</th>
                <th>Role</th>
                <th>Leader</th>
                <th>Connected since</th>
              </tr>
            </thead>
            <tbody>
              {health.replicas.map((r) => (
                <tr key={r.replicaId}>
                  <td className="mono">{r.replicaId}</td>
                  <td>{r.role}</td>
                  <td>{r.leader ? <span className="badge s-success">leader</span> : ''}</td>
                  <td>
                    <TimeText at={r.connectedSince} />
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
          <p className="muted small note">
            {health.edition} · dispatch queue {health.dispatchQueueDepth}/{health.dispatchQueueCapacity} ·{' '}
            {health.live ? 'live' : 'not live'}, {health.ready ? 'ready' : 'not ready'} · database{' '}
            {health.databaseLatencyMs.toFixed(1)} ms
          </p>
        </div>
      )}
      <h2>Agents</h2>
      {agents && agents.length === 0 && <p className="muted">No agents: tasks run on this server&apos;s executor.</p>}
      {agents && agents.length > 0 && (
        <div className="table-wrap">
          <table>
            <thead>
              <tr>
                <th>Agent</th>
                <th>Health</th>
                <th>Labels</th>
                <th className="right">Running / slots</th>
                <th>Last seen</th>
                <th className="right">Actions</th>
              </tr>
            </thead>
            <tbody>
              {agents.map((a) => {
                const h = (AgentHealth[a.health] ?? 'unspecified').toLowerCase();
                return (
                  <tr key={a.agentId} data-agent={a.agentId}>
                    <td className="mono nowrap">{a.agentId}</td>
                    <td>
                      <span className="badges">
                        <span className={`badge h-${h}`}>{h}</span>
                        {a.draining && <span className="badge s-paused">draining</span>}
                      </span>
                    </td>
                    <td>
                      {Object.entries(a.labels).map(([k, v]) => (
                        <span key={k} className="label">
                          {k}={v}
                        </span>
                      ))}
                    </td>
                    <td className="right">
                      {a.running} / {a.slots}
                    </td>
                    <td>
                      <TimeText at={a.lastSeenAt} />
                    </td>
                    <td className="right">
                      <button disabled={!canOperate} onClick={() => void drain(a)}>
                        {a.draining ? 'Undrain' : 'Drain'}
                      </button>
                    </td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}
