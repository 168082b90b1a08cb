/**
 * A wait's match values read from its inputs: `$inputs.TASK.PATH` is the output of its upstream
 * TASK at PATH, as LEOFLOW_INPUTS would hold it. Unlike `$conf.` (read when the wait starts),
 * they are read when an event of the wait's name comes, so the planner reads no outputs; an
 * upstream's output does not change while the wait waits. Pure: the store reads the outputs.
 */
import type { EventMatch, MatchValue } from './event-match.js';
import { parseInputRef } from './task-inputs.js';

const INPUT_REF = /^\$inputs\.(.+)$/;

/** The references a match makes to its inputs (`extract.id` for `$inputs.extract.id`). */
export function inputRefs(match: EventMatch | null | undefined): string[] {
  const refs: string[] = [];
  for (const want of Object.values(match ?? {})) {
    for (const v of Array.isArray(want) ? want : [want]) {
      const ref = typeof v === 'string' ? INPUT_REF.exec(v) : null;
      if (ref) refs.push(ref[1]!);
    }
  }
  return refs;
}

/** The task ids a reference could name (a task id may hold dots): `a`, `a.b`, `a.b.c` for `a.b.c`. */
export function refTaskCandidates(refs: readonly string[]): string[] {
  const out = new Set<string>();
  for (const ref of refs) {
    const words = ref.split('.');
    for (let i = 1; i <= words.length; i++) out.add(words.slice(0, i).join('.'));
  }
  return [...out];
}

/**
 * The match with each `$inputs.TASK.PATH` replaced by the value there in `inputs` (upstream id →
 * its output). A value that is absent, or is an object or a list, matches no event, as a missing
 * `$conf.` value does: the wait then ends only at its timeout.
 */
export function bindInputs(match: EventMatch, inputs: Readonly<Record<string, unknown>>): EventMatch {
  const one = (v: MatchValue): MatchValue | MatchValue[] => {
    const ref = typeof v === 'string' ? INPUT_REF.exec(v) : null;
    if (!ref) return v;
    const { task, path } = parseInputRef(ref[1]!, Object.keys(inputs));
    let at: unknown = Object.hasOwn(inputs, task) ? inputs[task] : undefined;
    for (const key of path) {
      if (at === null || typeof at !== 'object' || !Object.hasOwn(at, key)) return [];
      at = (at as Record<string, unknown>)[key];
    }
    const scalar = at === null || ['string', 'number', 'boolean'].includes(typeof at);
    return at !== undefined && scalar ? (at as MatchValue) : [];
  };
  const out: EventMatch = {};
  for (const [path, want] of Object.entries(match)) {
    out[path] = Array.isArray(want) ? want.flatMap((w) => one(w)) : one(want);
  }
  return out;
}
