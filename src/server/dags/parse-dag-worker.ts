/**
 * Piscina worker: parses one DAG file off the event loop. Loaded only by the pool in
 * `dag-parser.ts`, from the compiled `dist/` tree.
 *
 * The result is plain data because only structured-cloneable values cross the thread boundary:
 * a `DagValidationError` would arrive as a bare `Error` without `file` and `issues`, so the pool
 * rebuilds it from `{ ok: false, file, issues }`.
 */
import { DagValidationError, type DagIssue, type DagSpec } from '../../core/dag-spec.js';
import { parseDag } from '../../core/dag/parse-dag.js';

export interface ParseDagInput {
  source: string;
  file: string;
}

export type ParseDagResult = { ok: true; spec: DagSpec } | { ok: false; file: string; issues: DagIssue[] };

/** Anything other than a validation failure (a bug) is thrown and reaches the caller as an error. */
export default function parseDagInWorker(input: ParseDagInput): ParseDagResult {
  try {
    return { ok: true, spec: parseDag(input.source, input.file) };
  } catch (err) {
    if (err instanceof DagValidationError) return { ok: false, file: err.file, issues: err.issues };
    throw err;
  }
}
