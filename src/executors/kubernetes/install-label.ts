import { POD_SELECTOR } from '../../core/pod-identity.js';

/**
 * Which install a pod belongs to: the database's install id (src/db/install-identity.ts). Every
 * pod carries it, and the executor's watches select on it, so every decision made from what they
 * show (strays at a lead, earlier tries of a retry, finished pods' retention) sees only this
 * install's pods: another install in the same namespace, whose task instance ids start at 1 as
 * ours do, is never touched, nor is a pod without the label that no install can prove its own.
 */
export const INSTALL_LABEL = 'leoflow.io/install';

/** The label selector of this install's pods. */
export function installSelector(install: string): string {
  return `${POD_SELECTOR},${INSTALL_LABEL}=${install}`;
}
