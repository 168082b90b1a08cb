import type { Route, Verb } from './api-route.js';
import type { StatusDetails } from './status.js';

/** A failure a test injects: the next matching requests are answered with it. */
export interface FailureRule {
  verb?: Verb | '*';
  resource?: string;
  namespace?: string;
  name?: string;
  /** An HTTP status answered with the matching Status, or 'reset' to drop the connection without an answer. */
  status: number | 'reset';
  reason?: string;
  message?: string;
  retryAfterSeconds?: number;
  details?: StatusDetails;
  /** How many matching requests fail (default 1). */
  times?: number;
  /** Serve the request (its effect happens) and then answer with the failure: a response lost after commit. */
  afterEffect?: boolean;
}

/** The failures injected and not yet spent, first added first matched. */
export class FailureRules {
  private rules: Array<FailureRule & { left: number }> = [];

  add(rule: FailureRule): void {
    this.rules.push({ ...rule, left: rule.times ?? 1 });
  }

  /** The first rule matching the request, spending one of its times. */
  take(route: Route): FailureRule | undefined {
    const i = this.rules.findIndex(
      (f) =>
        (f.verb === undefined || f.verb === '*' || f.verb === route.verb) &&
        (f.resource === undefined || f.resource === route.resource) &&
        (f.namespace === undefined || f.namespace === route.namespace) &&
        (f.name === undefined || f.name === route.name),
    );
    if (i < 0) return undefined;
    const f = this.rules[i]!;
    if (--f.left <= 0) this.rules.splice(i, 1);
    return f;
  }
}
