import { readFileSync, readdirSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  ACTIVE_RUN_STATES,
  ACTIVE_TI_STATES,
  CLAIMED_TI_STATES,
  RUN_END_FROM,
  RUN_START_FROM,
  STARTED_RUN_STATES,
  STARTED_TI_STATES,
  UNSETTLED_TI_STATES,
  WAITING_TI_STATES,
} from '../../src/core/states.js';
import { inlineLiterals } from '../../src/db/inline-literals.js';
import type { Sql } from '../../src/db/sql.js';

/** Every migration's `create index <name> … where state …` predicate, as the list of states it names. */
function partialIndexStates(): Map<string, string[]> {
  const dir = new URL('../../src/db/migrations/', import.meta.url);
  const text = readdirSync(dir)
    .map((f) => readFileSync(new URL(f, dir), 'utf8'))
    .join('\n');
  const out = new Map<string, string[]>();
  for (const m of text.matchAll(/create index (\w+) on \w+ \([^)]*\)\s*where state (?:=|in) \(?([^)\n;]*)\)?;/g)) {
    out.set(
      m[1]!,
      [...m[2]!.matchAll(/'([a-z_]+)'/g)].map((s) => s[1]!),
    );
  }
  return out;
}

describe('the state lists the guards write', () => {
  it('are the predicates of the partial indexes the guards rely on', () => {
    const indexes = partialIndexStates();
    expect(indexes.get('task_instances_agent')).toEqual(ACTIVE_TI_STATES);
    expect(indexes.get('task_instances_live')).toEqual(UNSETTLED_TI_STATES);
    expect(indexes.get('dag_runs_active')).toEqual(ACTIVE_RUN_STATES);
    expect(indexes.get('dag_runs_running')).toEqual(STARTED_RUN_STATES);
  });

  it('split the active states as the state table does', () => {
    expect(CLAIMED_TI_STATES).toEqual(['queued']);
    expect(STARTED_TI_STATES).toEqual(['running']);
    expect(WAITING_TI_STATES).toEqual(['none', 'scheduled', 'up_for_retry', 'waiting']);
    expect(RUN_START_FROM).toEqual(['queued']);
    expect(RUN_END_FROM).toEqual(['running']);
  });
});

describe('inlineLiterals', () => {
  // Only `unsafe` is called: the text it is given is what goes into the statement.
  const sql = { unsafe: (text: string) => text } as unknown as Sql;

  it('writes fixed names as SQL literals', () => {
    expect(inlineLiterals(sql, ACTIVE_TI_STATES)).toBe("'queued', 'running'");
    expect(inlineLiterals(sql, 'ti.state')).toBe("'ti.state'");
  });

  it('refuses anything that is not a fixed name, and an empty list', () => {
    expect(() => inlineLiterals(sql, ["queued') or true --"])).toThrow(/not a fixed name/);
    expect(() => inlineLiterals(sql, ['Queued'])).toThrow(/not a fixed name/);
    expect(() => inlineLiterals(sql, [])).toThrow(/empty/);
  });
});
