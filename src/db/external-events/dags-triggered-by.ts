import type { TriggerSpec } from '../../core/dag-spec.js';
import type { Sql, TxSql } from '../sql.js';

/** The DAGs with a trigger on event `name`, with their triggers (the GIN index on them finds them). */
export async function dagsTriggeredBy(
  tx: Sql | TxSql,
  name: string,
): Promise<{ dagId: string; triggers: TriggerSpec[] }[]> {
  const rows = await tx<{ dag_id: string; triggers: TriggerSpec[] }[]>`
    select dag_id, spec -> 'triggers' as triggers from dags
    where spec -> 'triggers' @> ${tx.json([{ event: name }] as never)}
    order by dag_id`;
  return rows.map((r) => ({ dagId: r.dag_id, triggers: r.triggers }));
}
