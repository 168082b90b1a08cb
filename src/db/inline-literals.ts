import type { Fragment, Sql, TxSql } from './sql.js';

/** What our fixed names look like (states, event kinds): nothing in them needs quoting. */
const FIXED_NAME = /^[a-z][a-z_.]*$/;

/**
 * Fixed names of ours, a state list from core/states.ts or an event kind, written into a
 * statement's text as SQL literals (`'queued', 'running'`) instead of bound: a partial index whose
 * predicate lists states serves a query only if its test provably implies the predicate, and a
 * parameter of a kept generic plan proves nothing. Safe because the names are a fixed enum, never
 * user input: anything that is not such a name throws.
 */
export function inlineLiterals(sql: Sql | TxSql, names: string | readonly string[]): Fragment {
  const list = typeof names === 'string' ? [names] : names;
  if (list.length === 0) throw new Error('inlineLiterals: an empty list (`in ()` is not SQL)');
  for (const n of list)
    if (!FIXED_NAME.test(n)) throw new Error(`inlineLiterals: not a fixed name: ${JSON.stringify(n)}`);
  return sql.unsafe(list.map((n) => `'${n}'`).join(', '));
}
