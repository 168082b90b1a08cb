import { create } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import type { CurrentOutput } from '../../src/db/attempts/current-outputs.js';
import { TaskInstanceSchema } from '../../src/gen/leoflow/v1/types_pb.js';
import { INLINE_OUTPUT_BYTES, OUTPUT_BUDGET_BYTES, withOutputs } from '../../src/server/api/outputs-in-response.js';

const ti = (tiId: string) => create(TaskInstanceSchema, { tiId, taskId: `t${tiId}` });

describe('outputs in GetRun / ListTaskInstances', () => {
  it('inlines outputs in task order while the budget lasts, then gives size and output_omitted', () => {
    const each = INLINE_OUTPUT_BYTES;
    const n = Math.floor(OUTPUT_BUDGET_BYTES / each) + 2;
    const json = `"${'x'.repeat(each - 2)}"`;
    const tis = Array.from({ length: n }, (_, i) => ti(String(i + 1)));
    const outputs = new Map<string, CurrentOutput>(
      tis.map((t) => [t.tiId, { sizeBytes: each, json, cachedFrom: null }]),
    );
    outputs.set('1', { sizeBytes: each, json, cachedFrom: { runId: '7', tryNumber: 2 } });
    const out = withOutputs(tis, outputs);
    const inlined = out.filter((t) => t.outputJson !== '');
    expect(inlined).toHaveLength(OUTPUT_BUDGET_BYTES / each);
    expect(out.slice(inlined.length).every((t) => t.outputOmitted && t.outputSizeBytes === each)).toBe(true);
    expect([out[0]!.cachedFromRunId, out[0]!.cachedFromTry]).toEqual(['7', 2]);
  });

  it('gives a big output as its size only, and leaves a task without output empty', () => {
    const out = withOutputs(
      [ti('1'), ti('2')],
      new Map([['1', { sizeBytes: INLINE_OUTPUT_BYTES + 1, json: null, cachedFrom: null }]]),
    );
    expect([out[0]!.outputJson, out[0]!.outputSizeBytes, out[0]!.outputOmitted]).toEqual([
      '',
      INLINE_OUTPUT_BYTES + 1,
      true,
    ]);
    expect([out[1]!.outputSizeBytes, out[1]!.outputOmitted]).toEqual([0, false]);
  });
});
