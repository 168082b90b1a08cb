import type { EventMatch } from '../../core/event-match.js';
import { bindInputs, inputRefs, refTaskCandidates } from '../../core/match-inputs.js';
import type { Sql, TxSql } from '../sql.js';
import { inputsOfWaits } from './inputs-of-waits.js';

/**
 * These waits with the `$inputs.` values of their matches read from their upstreams' outputs, in
 * one read made only when a match names its inputs; then `eventMatches` decides each.
 */
export async function bindWaitInputs<W extends { ti_id: string; match: EventMatch | null }>(
  tx: Sql | TxSql,
  waits: readonly W[],
): Promise<W[]> {
  const named = waits.filter((w) => inputRefs(w.match).length > 0);
  if (named.length === 0) return [...waits];
  const refs = named.flatMap((w) => inputRefs(w.match));
  const inputs = await inputsOfWaits(
    tx,
    named.map((w) => w.ti_id),
    refTaskCandidates(refs),
  );
  return waits.map((w) =>
    w.match && inputRefs(w.match).length > 0 ? { ...w, match: bindInputs(w.match, inputs.get(w.ti_id) ?? {}) } : w,
  );
}
