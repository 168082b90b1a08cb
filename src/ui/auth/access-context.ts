import { createContext, useContext } from 'react';

export type Role = 'viewer' | 'operator' | 'admin';

const RANK: Record<Role, number> = { viewer: 0, operator: 1, admin: 2 };

/**
 * What the caller may do here, as detectRole found it: the token's role, and `readOnly`, why this
 * replica refuses every write (an observer) or null. `known` is false while WhoAmI is on its way: the
 * page is drawn meanwhile (its data is asked for at once), its write buttons disabled until then.
 */
export interface AccessInfo {
  role: Role;
  readOnly: string | null;
  known: boolean;
}

export const AccessContext = createContext<AccessInfo>({ role: 'viewer', readOnly: null, known: false });

/** Whether the caller's role covers `needed` here (the server's rpc-roles.ts decides; this only greys buttons). */
export function useCan(needed: Role): boolean {
  const a = useContext(AccessContext);
  return a.known && a.readOnly === null && RANK[a.role] >= RANK[needed];
}

/** Why a write button is disabled, for its tooltip: this replica's reason, else the role's; undefined if allowed. */
export function useWhyNot(needed: Role): string | undefined {
  const a = useContext(AccessContext);
  if (!a.known) return undefined;
  if (a.readOnly !== null) return a.readOnly;
  return RANK[a.role] >= RANK[needed] ? undefined : `role ${a.role} may not do this (${needed} or above)`;
}
