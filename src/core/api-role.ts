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
 * matched whole, so `gpu-*` never admits `x-gpu-1`.
 */
export function agentPatternMatches(pattern: string, agentId: string): boolean {
  const re = pattern.replace(/[.+^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '.*').replace(/\?/g, '.');
  return new RegExp(`^${re}$`, 's').test(agentId);
}

/** Why an agent pattern is unusable, or null. */
export function agentPatternProblem(pattern: string): string | null {
  if (pattern === '') return 'must not be empty (use "*" for any agent id)';
  if (pattern.length > 253) return `must be at most 253 characters, got ${pattern.length}`;
  if (!/^[A-Za-z0-9._*?-]+$/.test(pattern)) return `may hold only letters, digits, ".", "_", "-" and the wildcards "*" and "?", got ${JSON.stringify(pattern.slice(0, 80))}`;
  return null;
}
