import { useCallback, useEffect, useState } from 'react';
import { AgentHealth, type Agent, type GetHealthResponse } from '../../gen/leoflow/v1/cluster_pb.js';
import { cluster } from '../api/clients.js';
import { useCan, useWhyNot } from '../auth/access-context.js';
import { TimeText } from '../components/time-text.js';

/** How often the fleet is read again: agents have no watch stream; one read for the whole page. */
const REFRESH_MS = 5_000;

/**
 * Replicas (role, leader), the answering replica's queue depth and health checks, and agents (labels,
 * capabilities, slots, running, health; drain and undrain).
 */
export function FleetPage() {
  const [agents, setAgents] = useState<Agent[] | null>(null);
  const [health, setHealth] = useState<GetHealthResponse | null>(null);
  const [error, setError] = useState<string | null>(null);
  const canOperate = useCan('operator');
  const whyNot = useWhyNot('operator');
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
                <tr key={r.replicaId} data-replica={r.replicaId}>
                  <td className="mono">
                    {r.replicaId}
                    {r.replicaId === health.replicaId && <span className="muted"> · answering</span>}
                  </td>
                  <td>{r.role}</td>
                  <td>{r.leader ? <span className="badge s-success">leader</span> : ''}</td>
                  <td>
                    <TimeText at={r.connectedSince} />
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {health && <HealthFacts health={health} />}
      <h2>Agents</h2>
      {agents && agents.length === 0 && <p className="muted">No agents: tasks run on this server&apos;s executor.</p>}
      {agents && agents.length > 0 && (
        <div className="table-wrap">
          <table>
            <thead>
              <tr>
                <th>Agent</th>
                <th>Health</th>
                <th>Labels · capabilities</th>
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
                      {a.capabilities.map((c) => (
                        <span key={c} className="label cap" data-capability={c}>
                          {c}
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
                      <button title={whyNot} disabled={!canOperate} onClick={() => void drain(a)}>
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

/** The answering replica's figures and each of its liveness and readiness checks (GetHealth). */
function HealthFacts({ health }: { health: GetHealthResponse }) {
  const checks = [
    ...health.liveChecks.map((c) => ({ ...c, kind: 'live' })),
    ...health.readyChecks.map((c) => ({ ...c, kind: 'ready' })),
  ];
  const agents = [
    `${health.agentsHealthy} healthy`,
    `${health.agentsStale} stale`,
    `${health.agentsDead} dead`,
    `${health.agentsStopped} stopped`,
  ];
  return (
    <>
      <h2>Health</h2>
      <dl className="facts" data-testid="health">
        <dt>Replica</dt>
        <dd>
          <span className="mono">{health.replicaId}</span> · {health.edition} · role {health.role}
        </dd>
        <dt>Queue depth</dt>
        <dd data-testid="queue-depth">
          {health.dispatchQueueDepth} of {health.dispatchQueueCapacity} in the dispatch queue
        </dd>
        <dt>Leader</dt>
        <dd>
          {health.leaderId ? <span className="mono">{health.leaderId}</span> : 'none leads'}
          {health.lastFullStepAt && (
            <span className="muted">
              {' '}
              · last full step <TimeText at={health.lastFullStepAt} />
              {health.lastFullStepLateMs > 0n && `, ${health.lastFullStepLateMs} ms late`}
            </span>
          )}
        </dd>
        <dt>Database</dt>
        <dd>
          {health.databaseReachable ? `${health.databaseLatencyMs.toFixed(1)} ms` : 'unreachable'}
          {health.migrationsVersion && <span className="muted"> · {health.migrationsVersion}</span>}
        </dd>
        <dt>Agents</dt>
        <dd>{agents.join(' · ')}</dd>
      </dl>
      <div className="table-wrap">
        <table data-testid="health-checks">
          <thead>
            <tr>
              <th>Check</th>
              <th>For</th>
              <th>Result</th>
              <th>Detail</th>
            </tr>
          </thead>
          <tbody>
            {checks.map((c) => (
              <tr key={`${c.kind}/${c.name}`} data-check={`${c.kind}/${c.name}`}>
                <td className="mono">{c.name}</td>
                <td>{c.kind === 'live' ? 'liveness (/healthz)' : 'readiness (/readyz)'}</td>
                <td>
                  <span className={`badge ${c.ok ? 's-success' : 's-failed'}`}>{c.ok ? 'ok' : 'failing'}</span>
                </td>
                <td className="muted">{c.detail}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </>
  );
}
