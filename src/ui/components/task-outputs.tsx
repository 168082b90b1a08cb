import { useEffect, useState } from 'react';
import type { TaskOutput } from '../../gen/leoflow/v1/workflow_pb.js';
import { workflow } from '../api/clients.js';
import { CopyButton } from './copy-button.js';
import { TimeText } from './time-text.js';

/**
 * Characters of an output drawn at first: the server bounds what a try stores (--max-output-size,
 * up to 1 MiB), and a page drawing a megabyte of JSON per try would stall; the copy is whole.
 */
export const OUTPUT_SHOWN_CHARS = 8_192;

/**
 * Each try's output (GetTaskOutput, newest try first), indented, cut at OUTPUT_SHOWN_CHARS with a
 * button for the rest, and copyable. `endedKey` changes when a try ends, which is when one lands.
 */
export function TaskOutputs({ runId, taskId, endedKey }: { runId: string; taskId: string; endedKey: string }) {
  const [outputs, setOutputs] = useState<TaskOutput[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    const ctl = new AbortController();
    workflow.getTaskOutput({ runId, taskId }, { signal: ctl.signal }).then(
      (res) => {
        setOutputs(res.outputs);
        setError(null);
      },
      (err: Error) => !ctl.signal.aborted && setError(err.message),
    );
    return () => ctl.abort();
  }, [runId, taskId, endedKey]);
  return (
    <>
      <h2>Output</h2>
      {error && <p className="error">{error}</p>}
      {outputs && outputs.length === 0 && <p className="muted output-none">No try has stored an output.</p>}
      {outputs?.map((o) => (
        <OutputOfTry key={o.tryNumber} output={o} />
      ))}
    </>
  );
}

function OutputOfTry({ output }: { output: TaskOutput }) {
  const [whole, setWhole] = useState(false);
  const text = indented(output.json);
  const cut = !whole && text.length > OUTPUT_SHOWN_CHARS;
  return (
    <div className="output" data-output-try={output.tryNumber}>
      <div className="output-head">
        <span>
          Try {output.tryNumber} · {formatBytes(output.sizeBytes)} · <TimeText at={output.recordedAt} />
        </span>
        <CopyButton text={output.json} label={`output of try ${output.tryNumber}`} />
      </div>
      <pre data-testid="output">{cut ? text.slice(0, OUTPUT_SHOWN_CHARS) : text}</pre>
      {cut && (
        <p className="output-cut">
          The first {formatBytes(OUTPUT_SHOWN_CHARS)} of {formatBytes(text.length)} shown.{' '}
          <button className="quiet small" onClick={() => setWhole(true)}>
            Show all
          </button>
        </p>
      )}
    </div>
  );
}

/** The JSON indented by two spaces; as stored when it does not parse (it always should). */
function indented(json: string): string {
  try {
    return JSON.stringify(JSON.parse(json), null, 2);
  } catch {
    return json;
  }
}

function formatBytes(n: number): string {
  return n < 1024 ? `${n} B` : `${(n / 1024).toFixed(n < 10_240 ? 1 : 0)} KiB`;
}
