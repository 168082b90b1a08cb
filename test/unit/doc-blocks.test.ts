import { describe, expect, it } from 'vitest';
import { normalizeLine, outputMismatch } from '../helpers/doc-blocks.js';

/** How the docs test compares a page's sample output with a real one: tolerant of what varies
 *  from run to run, and of columns and prefixes only where a block says so. */
describe('doc-blocks output comparison', () => {
  const shown = [
    'run 2 of fan_out (manual, key manual__2026-11-28T04:02:52.904Z__2c78e8, DAG version 1)',
    'greet    none   0/1  -     -        -         DAG_PAUSED',
  ];

  it('ignores numbers, durations, run keys and column widths', () => {
    expect(normalizeLine('flaky  success  2/3  0  2026-11-28 04:02:54.448  25ms')).toBe(
      normalizeLine('flaky success 1/3 0 2027-01-01 00:00:00.000 1.2s'),
    );
    const real =
      'run 7 of fan_out (manual, key manual__2027-01-01T00:00:00.000Z__abcdef, DAG version 3)\ngreet none 0/1 - - - DAG_PAUSED\n';
    expect(outputMismatch(shown, real, false)).toBeNull();
  });

  it('finds a changed word or a missing line', () => {
    expect(
      outputMismatch(
        shown,
        'run 7 of fan_out (manual, key manual__x__abcdef, DAG version 3)\ngreet none 0/1 - - - MAX_ACTIVE_RUNS\n',
        false,
      ),
    ).toMatch(/no line like/);
    expect(outputMismatch(['DAG hello paused'], 'DAG hello unpaused\n', false)).toMatch(/no line like/);
  });

  it('with columns=N, takes new columns but still checks the first fields and the wait reason', () => {
    const wider = 'greet none 0/1 - - - - agent-1 - DAG_PAUSED\n';
    expect(outputMismatch([shown[1]!], wider, false)).not.toBeNull();
    expect(outputMismatch([shown[1]!], wider, false, { columns: 2 })).toBeNull();
    expect(
      outputMismatch([shown[1]!], 'greet none 0/1 - - - - agent-1 - UPSTREAM_RUNNING\n', false, { columns: 2 }),
    ).not.toBeNull();
    expect(outputMismatch([shown[1]!], 'greet running 1/1 - - - - agent-1 -\n', false, { columns: 2 })).not.toBeNull();
  });

  it('with contains, takes a prefix such as a timestamp', () => {
    expect(
      outputMismatch(['[flaky #2] flaky: ok on try 2'], '04:02:54.470 [flaky #2] flaky: ok on try 2\n', false, {
        contains: true,
      }),
    ).toBeNull();
    expect(
      outputMismatch(['[flaky #2] flaky: ok on try 2'], '[flaky #2] flaky: failed\n', false, { contains: true }),
    ).not.toBeNull();
  });

  it('loose compares the first and the last line only', () => {
    expect(
      outputMismatch(
        ['run 1 of hello triggered (key …)', 'anything', 'run 1 success in 0.9s: 2 success'],
        'run 4 of hello triggered (key k)\nx\nrun 4 success in 12ms: 2 success\n',
        true,
      ),
    ).toBeNull();
    expect(
      outputMismatch(
        ['run 1 of hello triggered (key …)', 'run 1 success in 0.9s: 2 success'],
        'run 4 of hello triggered (key k)\nrun 4 failed in 1s: 1 failed\n',
        true,
      ),
    ).not.toBeNull();
  });
});
