import { describe, expect, it } from 'vitest';
import { drawDag } from '../../src/cli/draw-dag.js';

/** `dag show`'s drawing of a DAG's shape (issue 33, item 5), line for line. */

const task = (id: string, ...dependsOn: string[]) => ({ id, dependsOn });
const lines = (...l: string[]) => l.join('\n');

describe('drawDag', () => {
  it('draws a chain as one straight line', () => {
    expect(drawDag([task('extract'), task('transform', 'extract'), task('load', 'transform')])).toBe(
      lines('extract', '│', '▼', 'transform', '│', '▼', 'load'),
    );
  });

  it('draws a diamond: a split, then a join', () => {
    expect(drawDag([task('a'), task('b', 'a'), task('c', 'a'), task('d', 'b', 'c')])).toBe(
      lines('a', '├───┐', '▼   ▼', 'b   c', '├───┘', '▼', 'd'),
    );
  });

  it('draws a fan-out and fan-in (examples/fan-out.yaml) with one line each way', () => {
    expect(
      drawDag([
        task('start'),
        task('count', 'start'),
        task('sum', 'start'),
        task('flaky', 'start'),
        task('join', 'count', 'flaky', 'sum'),
      ]),
    ).toBe(lines('start', '├───────┬─────┐', '▼       ▼     ▼', 'count   sum   flaky', '├───────┴─────┘', '▼', 'join'));
  });

  it('passes an edge that skips a layer through it, and puts each task one below its last dependency', () => {
    expect(drawDag([task('c', 'a', 'b'), task('b', 'a'), task('a')])).toBe(
      lines('a', '├───┐', '▼   │', 'b   │', '├───┘', '▼', 'c'),
    );
  });

  it('keeps apart two chains side by side, on shared rows', () => {
    expect(drawDag([task('a'), task('b'), task('c', 'a'), task('d', 'b')])).toBe(
      lines('a   b', '│   │', '▼   ▼', 'c   d'),
    );
  });

  it('puts a task under its leftmost dependency when there is room', () => {
    expect(drawDag([task('ok'), task('broken'), task('after', 'broken')])).toBe(
      lines('ok   broken', '     │', '     ▼', '     after'),
    );
  });

  it('gives each upper task its own line when not all of them go to all below', () => {
    // a → x, a → y, b → y: one shared line would draw b → x as well.
    expect(drawDag([task('a'), task('b'), task('x', 'a'), task('y', 'a', 'b')])).toBe(
      lines('a   b', '├───┤', '│   │', '▼   ▼', 'x   y'),
    );
  });
});
