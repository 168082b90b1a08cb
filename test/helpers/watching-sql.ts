import type { Sql } from '../../src/db/sql.js';

/**
 * Counts a tagged-template call as a statement once it is sent (awaited or `execute()`d): a call
 * put into another statement as a fragment is never sent on its own, and is not counted.
 */
export function countWhenSent<Q extends object>(query: Q, count: () => void): Q {
  let counted = false;
  const once = () => {
    if (!counted) ((counted = true), count());
  };
  const q = query as unknown as { then: (...a: unknown[]) => unknown; execute: () => unknown };
  // A helper call (`sql(columns)`, `sql.json(x)`) makes a piece of a statement, never sent alone.
  if (typeof q.execute !== 'function') return query;
  const then = q.then.bind(q);
  const execute = q.execute.bind(q);
  q.then = (...a: unknown[]) => (once(), then(...a));
  q.execute = () => (once(), execute());
  return query;
}

/** The pool, telling how many statements went straight to it and how many connections were
 *  reserved from it. */
export function watching(sql: Sql): { sql: Sql; direct(): number; reserved(): number } {
  let direct = 0;
  let reserved = 0;
  const pool = new Proxy(sql, {
    apply(t, thisArg, args) {
      return countWhenSent(Reflect.apply(t as never, thisArg, args) as object, () => direct++);
    },
    get(t, prop, receiver) {
      if (prop !== 'reserve') return Reflect.get(t, prop, receiver);
      return () => (reserved++, t.reserve());
    },
  });
  return { sql: pool, direct: () => direct, reserved: () => reserved };
}

/** The pool, counting the statements sent through it or through a connection it reserved (a
 *  tagged-template call sent; one put into another as a fragment is part of that one). */
export function countingStatements(sql: Sql): { sql: Sql; count(): number } {
  let n = 0;
  const count = <T extends object>(target: T): T =>
    new Proxy(target, {
      apply(t, thisArg, args) {
        return countWhenSent(Reflect.apply(t as never, thisArg, args) as object, () => n++);
      },
      get(t, prop, receiver) {
        if (prop !== 'reserve') return Reflect.get(t, prop, receiver);
        return async () => count(await (t as unknown as Sql).reserve());
      },
    });
  return { sql: count(sql), count: () => n };
}
