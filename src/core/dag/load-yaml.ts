/**
 * Turns the text of a DAG file into plain data, or into issues when the text is not a clean
 * YAML 1.2 (or JSON) document. Nothing here knows what a DAG looks like; `readDag` does.
 */
import { parseDocument } from 'yaml';

import type { DagIssue } from '../dag-spec.js';
import { firstLine } from './issue-messages.js';

/** Low on purpose: a legitimate DAG file needs few aliases; a "billion laughs" file needs many. */
const MAX_ALIAS_COUNT = 100;
/** Past the first few, YAML errors are mostly echoes of the first one. */
const MAX_YAML_ISSUES = 20;

/**
 * Parses `source` as one YAML 1.2 document with unique string keys and only the core tags.
 * Returns the document as plain JS data, or undefined after pushing every problem (at most
 * {@link MAX_YAML_ISSUES} of them, then a count) onto `issues`, all with the root path.
 */
export function loadYaml(source: string, issues: DagIssue[]): unknown {
  let doc;
  try {
    doc = parseDocument(source, {
      version: '1.2',
      uniqueKeys: true,
      stringKeys: true,
      // Only the core tags (str, int, float, bool, null, map, seq): `!!binary`, `!!set`,
      // `!!timestamp` would produce values no field accepts, so they are reported instead.
      resolveKnownTags: false,
      prettyErrors: true,
      logLevel: 'error', // no process warnings from a pure function; 'silent' would also drop MULTIPLE_DOCS
    });
  } catch (err) {
    issues.push({ path: '', message: `invalid YAML: ${firstLine(err)}` });
    return undefined;
  }
  const problems = [...doc.errors, ...doc.warnings];
  for (const problem of problems.slice(0, MAX_YAML_ISSUES)) {
    issues.push({ path: '', message: `invalid YAML: ${firstLine(problem)}` });
  }
  if (problems.length > MAX_YAML_ISSUES) {
    issues.push({ path: '', message: `invalid YAML: ${problems.length - MAX_YAML_ISSUES} more errors not shown` });
  }
  if (problems.length > 0) return undefined;
  try {
    return doc.toJS({ maxAliasCount: MAX_ALIAS_COUNT });
  } catch (err) {
    // The yaml package throws ReferenceError for an undefined alias and for an alias bomb.
    const reason = firstLine(err);
    const message = /resource exhaustion/.test(reason)
      ? `invalid YAML: too many alias expansions (limit ${MAX_ALIAS_COUNT}); the document looks like an alias bomb`
      : `invalid YAML: ${reason}`;
    issues.push({ path: '', message });
    return undefined;
  }
}
