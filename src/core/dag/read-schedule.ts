/**
 * The DAG's `schedule`: a cron expression or a preset. It is checked here, in the DAG's time
 * zone, so a schedule the scheduler could not compute is refused when the file is applied.
 */
import { CronExpressionParser } from 'cron-parser';

import type { DagIssue } from '../dag-spec.js';
import { describe, expected, firstLine } from './issue-messages.js';
import { suggest } from './suggest.js';

const CRON_PRESETS = ['@hourly', '@daily', '@weekly', '@monthly', '@yearly'];
/** Jenkins-style `H` picks a random value per parse; replicas would disagree on the schedule. */
const CRON_HASH = /(?<![A-Za-z])[Hh](?![A-Za-z])/;

/**
 * A cron expression of 5 or 6 fields, returned with its whitespace normalized to single spaces,
 * or one of the presets as is; undefined (with an issue) otherwise.
 */
export function readSchedule(value: unknown, path: string, timezone: string, issues: DagIssue[]): string | undefined {
  const what = `a cron expression like "*/5 * * * *" or one of ${CRON_PRESETS.join(', ')}`;
  if (typeof value !== 'string') {
    issues.push(expected(what, value, path));
    return undefined;
  }
  const trimmed = value.trim();
  if (trimmed.startsWith('@')) {
    if (CRON_PRESETS.includes(trimmed)) return trimmed;
    issues.push(expected(what, value, path, suggest(trimmed, CRON_PRESETS)));
    return undefined;
  }
  const fields = trimmed.split(/\s+/);
  if (trimmed === '' || fields.length < 5 || fields.length > 6) {
    const count = trimmed === '' ? 0 : fields.length;
    issues.push({
      path,
      message:
        `invalid cron expression ${describe(value)}: ` +
        `expected 5 fields (minute hour day-of-month month day-of-week) or 6 (with seconds first), got ${count}`,
    });
    return undefined;
  }
  if (CRON_HASH.test(trimmed)) {
    issues.push({ path, message: `invalid cron expression ${describe(value)}: "H" (hashed) values are not supported` });
    return undefined;
  }
  const expression = fields.join(' ');
  try {
    CronExpressionParser.parse(expression, { tz: timezone });
  } catch (err) {
    issues.push({ path, message: `invalid cron expression ${describe(value)}: ${firstLine(err)}` });
    return undefined;
  }
  return expression;
}
