import type { NotifyRule } from '../../core/notify-rule.js';
import type { Sql } from '../sql.js';

/** This replica's `--notify` defaults become the install's (one transaction: never half a list). */
export async function writeNotifyDefaults(sql: Sql, rules: readonly NotifyRule[]): Promise<void> {
  const rows = rules.flatMap((r) => r.on.map((kind) => ({ kind, receiver: r.to })));
  await sql.begin(async (tx) => {
    await tx`delete from notify_defaults`;
    if (rows.length > 0) await tx`insert into notify_defaults ${tx(rows)} on conflict do nothing`;
  });
}
