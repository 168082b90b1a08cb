/**
 * What a notification is about, and who receives it. A DAG's `notify:` and the server's `--notify`
 * file's `defaults` name receivers; the file says where each one is (a webhook URL).
 */

/** The run ended this way, missed its deadline (`deadline:`), or a task of it asks for an approval. */
export const NOTIFY_KINDS = ['failed', 'success', 'deadline_missed', 'approval_requested'] as const;
export type NotifyKind = (typeof NOTIFY_KINDS)[number];

/** A receiver's name, as `--notify` defines it and a DAG's rule names it. */
export const RECEIVER_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$/;
export const RECEIVER_NAME_RULE = "1-100 letters, digits, '_', '.' or '-', starting with a letter or digit";

/** On these kinds, tell this receiver. */
export interface NotifyRule {
  on: NotifyKind[];
  to: string;
}
