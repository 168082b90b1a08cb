import { randomUUID } from 'node:crypto';

/**
 * This agent process's incarnation id, sent in every Hello. Made once per process, so a restarted
 * agent is told apart from the same process reconnecting: the control plane never sends an
 * attempt given to one incarnation, with the same token, to another.
 */
export const PROCESS_INCARNATION_ID = randomUUID();
