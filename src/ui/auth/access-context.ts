import { createContext, useContext } from 'react';

export type Role = 'viewer' | 'operator' | 'admin';

const RANK: Record<Role, number> = { viewer: 0, operator: 1, admin: 2 };

/** The caller's role, as detectRole found it. */
export const AccessContext = createContext<Role>('viewer');

/** Whether the caller's role covers `needed` (the server's rpc-roles.ts decides; this only greys buttons). */
export function useCan(needed: Role): boolean {
  return RANK[useContext(AccessContext)] >= RANK[needed];
}
