import { describe, expect, it } from 'vitest';
import { boundedLabel } from '../../src/server/observability/bounded-label.js';

describe('boundedLabel', () => {
  it('keeps the first values seen as they are, and reports any value past the bound as other', () => {
    const dag = boundedLabel(2);
    expect(['a', 'b', 'a', 'c', 'b', 'd'].map(dag)).toEqual(['a', 'b', 'a', 'other', 'b', 'other']);
  });
});
