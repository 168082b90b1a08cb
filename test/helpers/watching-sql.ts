import type { Sql } from '../../src/db/sql.js';

/** The pool, telling how many statements (tagged-template calls) went straight to it and how many
 *  connections were reserved from it. */
export function watching(sql: Sql): { sql: Sql; direct(): number; reserved(): number } {
  let direct = 0;
  let reserved = 0;
  const pool = new Proxy(sql, {
    apply(t, thisArg, args) {
      direct++;
      return Reflect.apply(t as never, thisArg, args);
    },
    get(t, prop, receiver) {
      if (prop !== 'reserve') return Reflect.get(t, prop, receiver);
      return () => (reserved++, t.reserve());
    },
  });
  return { sql: pool, direct: () => direct, reserved: () => reserved };
}
