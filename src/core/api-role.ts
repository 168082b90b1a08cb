/**
 * The roles an API token carries, weakest first: each may do all the ones before it may.
 * `agent` is apart: it says Hello on the agent stream and calls nothing else.
 */
export const API_ROLES = ['viewer', 'operator', 'admin'] as const;
export type ApiRole = (typeof API_ROLES)[number];
export const TOKEN_ROLES = [...API_ROLES, 'agent'] as const;
export type TokenRole = (typeof TOKEN_ROLES)[number];

/** True when a token of role `has` may do what needs `needs`. */
export function roleAllows(has: TokenRole, needs: ApiRole): boolean {
  if (has === 'agent') return false;
  return API_ROLES.indexOf(has) >= API_ROLES.indexOf(needs);
}

/**
 * An agent-id glob: `*` any run of characters, `?` one, everything else itself. A pattern is
 * matched whole, so `gpu-*` never admits `x-gpu-1`. Matched without a RegExp: the admin writes
 * the pattern but the token holder writes the id, and a backtracking RegExp of a few `*` froze
 * the event loop for 44 s on a 128-character id. Here a star is retried from one remembered
 * place only, so a match costs at most pattern length × id length steps.
 */
export function agentPatternMatches(pattern: string, agentId: string): boolean {
  let p = 0;
  let s = 0;
  let star = -1; // the last `*` seen in the pattern
  let resume = 0; // where in the id that star's run ends so far
  while (s < agentId.length) {
    if (p < pattern.length && (pattern[p] === '?' || pattern[p] === agentId[s])) {
      p++;
      s++;
    } else if (p < pattern.length && pattern[p] === '*') {
      star = p++;
      resume = s;
    } else if (star >= 0) {
      p = star + 1;
      s = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.length && pattern[p] === '*') p++;
  return p === pattern.length;
}

/** Why an agent pattern is unusable, or null. */
export function agentPatternProblem(pattern: string): string | null {
  if (pattern === '') return 'must not be empty (use "*" for any agent id)';
  if (pattern.length > 253) return `must be at most 253 characters, got ${pattern.length}`;
  if (!/^[A-Za-z0-9._*?-]+$/.test(pattern))
    return (
      `may hold only letters, digits, ".", "_", "-" and the wildcards "*" and "?", ` +
      `got ${JSON.stringify(pattern.slice(0, 80))}`
    );
  return null;
}
