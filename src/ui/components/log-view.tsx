import { useEffect, useRef, useState } from 'react';
import type { LogLine } from '../../gen/leoflow/v1/types_pb.js';
import { workflow } from '../api/clients.js';

/**
 * A task's log, followed live (TailLogs with follow: lines are pushed as they are written until the
 * task ends). It keeps to the end while you are there; scrolled up, it stays put and offers a jump.
 */
export function LogView({ runId, taskId }: { runId: string; taskId: string }) {
  const [lines, setLines] = useState<LogLine[]>([]);
  const [error, setError] = useState<string | null>(null);
  const [done, setDone] = useState(false);
  const [atEnd, setAtEnd] = useState(true);
  const box = useRef<HTMLPreElement>(null);
  useEffect(() => {
    const ctl = new AbortController();
    setLines([]);
    setDone(false);
    // TailLogs has no cursor: a follow that breaks is opened again, and the lines already shown
    // (by attempt and seq) are left out.
    const seen = new Set<string>();
    void (async () => {
      for (let failures = 0; !ctl.signal.aborted; failures++) {
        try {
          for await (const res of workflow.tailLogs({ runId, taskId, follow: true }, { signal: ctl.signal })) {
            failures = 0;
            setError(null);
            const fresh = res.lines.filter((l) => !seen.has(lineKey(l)));
            for (const l of fresh) seen.add(lineKey(l));
            if (fresh.length > 0) setLines((old) => [...old, ...fresh]);
          }
          setDone(true);
          return;
        } catch (err) {
          if (ctl.signal.aborted) return;
          setError(`${(err as Error).message} (reconnecting)`);
        }
        await new Promise((r) => setTimeout(r, Math.min(1_000 * 2 ** failures, 10_000)));
      }
    })();
    return () => ctl.abort();
  }, [runId, taskId]);
  useEffect(() => {
    if (atEnd && box.current) box.current.scrollTop = box.current.scrollHeight;
  }, [lines, atEnd]);
  const onScroll = () => {
    const b = box.current;
    if (b) setAtEnd(b.scrollHeight - b.scrollTop - b.clientHeight < 24);
  };
  return (
    <div className="log">
      <div className="log-head">
        <span>Log {done ? <span className="muted">(ended)</span> : <span className="live">● following</span>}</span>
        {!atEnd && (
          <button className="quiet" onClick={() => setAtEnd(true)}>
            Jump to end ↓
          </button>
        )}
      </div>
      {error && <p className="error">{error}</p>}
      <pre ref={box} onScroll={onScroll} data-testid="log">
        {lines.length === 0 && <span className="muted">No lines yet.</span>}
        {lines.map((l) => (
          <div key={lineKey(l)} className={`line ${l.stream}`}>
            <span className="try">{l.tryNumber}</span>
            {l.line}
          </div>
        ))}
      </pre>
    </div>
  );
}

function lineKey(l: LogLine): string {
  return `${l.tiId}/${l.tryNumber}/${l.seq}`;
}
