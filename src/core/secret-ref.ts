/**
 * A task environment variable whose value is a secret: the DAG names where the executor finds it,
 * never the value, so nothing secret is stored in Leoflow's database, sent over its API or shown
 * by its CLI. The executor that starts the task resolves the reference on its own machine.
 */

/** Where a secret's value is read from, by whoever starts the task's process. */
export type SecretRef =
  /** An environment variable of the process that starts the task (the server in Lite, an agent). */
  | { env: string }
  /** A file's whole contents, read when the attempt starts (an absolute path on that machine). */
  | { file: string }
  /** A key of a Secret in the pod's namespace, given to the pod as a `secretKeyRef`. */
  | { kubernetes: { name: string; key: string } };

/** A file holding a secret is read whole into the environment, so it is kept small. */
export const MAX_SECRET_FILE_BYTES = 64 * 1024;

/** The reference as a person reads it (`env DB_PASSWORD`, `file /run/secrets/x`, `kubernetes my-secret/token`). */
export function describeSecretRef(ref: SecretRef): string {
  if ('env' in ref) return `env ${ref.env}`;
  if ('file' in ref) return `file ${ref.file}`;
  return `kubernetes ${ref.kubernetes.name}/${ref.kubernetes.key}`;
}
