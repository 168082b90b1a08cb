import type { CurrentOutput } from '../../db/attempts/current-outputs.js';
import type { TaskInstance } from '../../gen/leoflow/v1/types_pb.js';

/** The bytes of outputs one GetRun/ListTaskInstances response carries at most, and one output at most. */
export const OUTPUT_BUDGET_BYTES = 256 * 1024;
export const INLINE_OUTPUT_BYTES = 16 * 1024;

/**
 * Fills the task instances' output fields from `outputs`, in their order, while the response's
 * budget lasts: a big run's response stays bounded whatever its tasks wrote, and an output left out
 * says so (its size, `output_omitted`) so the caller reads it with GetTaskOutput.
 */
export function withOutputs(tis: TaskInstance[], outputs: ReadonlyMap<string, CurrentOutput>): TaskInstance[] {
  let left = OUTPUT_BUDGET_BYTES;
  for (const ti of tis) {
    const o = outputs.get(ti.tiId);
    if (!o) continue;
    if (o.cachedFrom) {
      ti.cachedFromRunId = o.cachedFrom.runId;
      ti.cachedFromTry = o.cachedFrom.tryNumber;
    }
    if (o.sizeBytes === 0) continue;
    ti.outputSizeBytes = o.sizeBytes;
    if (o.json !== null && o.sizeBytes <= left) {
      ti.outputJson = o.json;
      left -= o.sizeBytes;
    } else ti.outputOmitted = true;
  }
  return tis;
}
