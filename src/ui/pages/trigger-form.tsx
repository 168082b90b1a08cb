import { useState, type FormEvent } from 'react';
import { workflow } from '../api/clients.js';
import { navigate } from '../live/use-route.js';

/** Where a conf's JSON is wrong, or null when it is an object (or empty). */
export function confProblem(text: string): string | null {
  if (!text.trim()) return null;
  try {
    const v: unknown = JSON.parse(text);
    if (typeof v !== 'object' || v === null || Array.isArray(v)) return 'must be a JSON object, like {"key": "value"}';
    return null;
  } catch (err) {
    return (err as Error).message;
  }
}

/** Triggers a run of a DAG with a conf, checked as JSON before it is sent; opens the new run. */
export function TriggerForm({ dagId, onClose }: { dagId: string; onClose(): void }) {
  const [conf, setConf] = useState('{}');
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const problem = confProblem(conf);
  const submit = (e: FormEvent) => {
    e.preventDefault();
    if (problem) return;
    setBusy(true);
    workflow
      .triggerRun({ dagId, confJson: conf.trim() })
      .then((res) => navigate(`/runs/${res.run!.runId}`))
      .catch((err: Error) => setError(err.message))
      .finally(() => setBusy(false));
  };
  return (
    <form className="trigger" onSubmit={submit} aria-label={`trigger ${dagId}`}>
      <label htmlFor={`conf-${dagId}`}>Conf (JSON object, given to tasks as LEOFLOW_RUN_CONF)</label>
      <textarea
        id={`conf-${dagId}`}
        name="conf"
        rows={4}
        spellCheck={false}
        value={conf}
        aria-invalid={problem !== null}
        onChange={(e) => setConf(e.target.value)}
      />
      {problem && <p className="field-error">{problem}</p>}
      {error && <p className="error">{error}</p>}
      <div className="actions">
        <button type="submit" disabled={problem !== null || busy}>
          Trigger run
        </button>
        <button type="button" className="quiet" onClick={onClose}>
          Close
        </button>
      </div>
    </form>
  );
}
