import { TI_VIEW_COLUMNS, type TiView } from './tis.js';
import type { Sql } from './sql.js';

/**
 * Where a page of a run's task instances starts: after one of its own (by id), or after a mapped
 * instance (its task's own instance and its index). Own task instances come first, then the mapped
 * ones task by task in item order, so the place is a key of an index and a page costs its size.
 */
export type TiPageStart = { kind: 'own'; afterId: string } | { kind: 'mapped'; parentId: string; afterIndex: number };

/** A task instance of a page, with what places it (null for the run's own). */
export type PagedTi = TiView & { map_parent: string | null; map_index: number | null };

/**
 * At most `limit` task instances of a run from `start` (the beginning when null): its own in id
 * order, then the mapped instances of each mapped task (by its instance's id) in item order.
 * Two statements at most, each an index range: a page of a 100,000-item map reads its page only.
 */
export async function runTisPage(
  sql: Sql,
  runId: string,
  start: TiPageStart | null,
  limit: number,
): Promise<PagedTi[]> {
  const cols = sql(TI_VIEW_COLUMNS);
  const page: PagedTi[] = [];
  if (start === null || start.kind === 'own') {
    const afterId = start?.afterId ?? '0';
    page.push(
      ...(await sql<PagedTi[]>`
        select ${cols}, null::bigint as map_parent, null::int as map_index from task_instances
        where run_id = ${runId} and map_parent is null and id > ${afterId}
        order by id limit ${limit}`),
    );
  }
  const left = limit - page.length;
  if (left <= 0) return page;
  // Read from the start, every own task instance is here: a run that maps nothing has no more.
  if (start === null && !page.some((t) => t.map_count !== null && t.map_count !== undefined)) return page;
  const fromParent = start?.kind === 'mapped' ? start.parentId : '0';
  const afterIndex = start?.kind === 'mapped' ? start.afterIndex : -1;
  const c = sql(TI_VIEW_COLUMNS.map((col) => `c.${col}`));
  page.push(
    ...(await sql<PagedTi[]>`
      select ${c}, c.map_parent, c.map_index
      from (select id from task_instances
            where run_id = ${runId} and map_parent is null and map_count is not null and id >= ${fromParent}) p
      cross join lateral (
        select ${cols}, map_parent, map_index from task_instances c
        where c.map_parent = p.id and (p.id > ${fromParent} or c.map_index > ${afterIndex})
        order by c.map_index limit ${left}) c
      order by c.map_parent, c.map_index limit ${left}`),
  );
  return page;
}

/** Each mapped task's instances counted by state, by the id of the mapped task's own instance. */
export async function mappedStateCounts(
  sql: Sql,
  parentIds: readonly string[],
): Promise<Map<string, Record<string, number>>> {
  const counts = new Map<string, Record<string, number>>();
  if (parentIds.length === 0) return counts;
  const rows = await sql<{ map_parent: string; state: string; n: number }[]>`
    select map_parent, state, count(*)::int as n from task_instances
    where map_parent = any(${parentIds as string[]}::bigint[]) group by 1, 2`;
  for (const r of rows) {
    const of = counts.get(r.map_parent) ?? {};
    of[r.state] = r.n;
    counts.set(r.map_parent, of);
  }
  return counts;
}
