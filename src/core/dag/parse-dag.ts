/**
 * The DAG parser's entry point: text in, a validated {@link DagSpec} or one
 * {@link DagValidationError} out. The stages live beside it: `check-dag-source-size.ts`,
 * `load-yaml.ts`, `read-dag.ts` (which reads the tasks and checks their graph).
 */
import { DagValidationError, type DagIssue, type DagSpec } from '../dag-spec.js';
import { checkDagSourceSize } from './check-dag-source-size.js';
import { loadYaml } from './load-yaml.js';
import { readDag } from './read-dag.js';

/**
 * Parses and validates a DAG file (YAML 1.2 or JSON) into its normalized spec.
 *
 * Validation is total: every problem is collected, with the path of the field, and thrown as one
 * {@link DagValidationError}; a partial spec is never returned. Issues come in the order found:
 * YAML-level problems alone (nothing else is checked in a broken document), otherwise each field
 * in file order, then the checks across tasks (unknown dependencies, then cycles).
 *
 * Cycles are named in run order, upstream first, starting at the member defined first in the
 * file: `b depends_on [a]`, `c depends_on [b]`, `a depends_on [c]` gives `cycle: a → b → c → a`.
 * One cycle is reported per back edge of a depth-first search, so fixing every reported cycle
 * (removing the dependency the issue's path points at) leaves the graph acyclic.
 *
 * Pure: no I/O. `file` is only used to label the error.
 */
export function parseDag(source: string, file: string): DagSpec {
  const issues: DagIssue[] = [];
  const sizeIssue = checkDagSourceSize(source);
  if (sizeIssue !== null) throw new DagValidationError(file, [sizeIssue]);

  const root = loadYaml(source, issues);
  if (issues.length > 0) throw new DagValidationError(file, issues);

  const spec = readDag(root, issues);
  if (issues.length > 0 || spec === undefined) throw new DagValidationError(file, issues);
  return spec;
}
