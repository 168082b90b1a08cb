/**
 * A task environment variable whose value is a secret: the DAG names where the executor finds it,
 * never the value, so nothing secret is stored in Leoflow's database, sent over its API or shown
 * by its CLI. The executor that starts the task resolves the reference on its own machine.
 */

/** Where a secret's value is read from, by whoever starts the task's process. */
export type SecretSource =
  /** An environment variable of the process that starts the task (the server in Lite, an agent). */
  | { env: string }
  /** A file's whole contents, read when the attempt starts (an absolute path on that machine). */
  | { file: string }
  /** A key of a Secret in the pod's namespace, given to the pod as a `secretKeyRef`. */
  | { kubernetes: { name: string; key: string } };

/** A file holding a secret is read whole into the environment, so it is kept small. */
export const MAX_SECRET_FILE_BYTES = 64 * 1024;

/** The reference as a person reads it (`env DB_PASSWORD`, `file /run/secrets/x`, `kubernetes my-secret/token`). */
export function describeSecretRef(ref: SecretSource): string {
  if ('env' in ref) return `env ${ref.env}`;
  if ('file' in ref) return `file ${ref.file}`;
  return `kubernetes ${ref.kubernetes.name}/${ref.kubernetes.key}`;
}

/** The shape of `leoflow.v1.SecretRef` on the wire (a oneof `source`), without importing the generated code. */
export type SecretRefWire = {
  source:
    | { case: 'env'; value: string }
    | { case: 'file'; value: string }
    | { case: 'kubernetes'; value: { name: string; key: string } }
    | { case: undefined; value?: undefined };
};

/** A map of references as the API and Assign carry them. */
export function secretEnvToWire(
  refs: Readonly<Record<string, SecretSource>> | undefined,
): Record<string, SecretRefWire> {
  const out: Record<string, SecretRefWire> = {};
  for (const [name, ref] of Object.entries(refs ?? {})) {
    out[name] =
      'env' in ref
        ? { source: { case: 'env', value: ref.env } }
        : 'file' in ref
          ? { source: { case: 'file', value: ref.file } }
          : { source: { case: 'kubernetes', value: { name: ref.kubernetes.name, key: ref.kubernetes.key } } };
  }
  return out;
}

/** References read back from the wire; throws naming the variable whose reference has no source. */
export function secretEnvFromWire(
  wire: Readonly<Record<string, SecretRefWire>>,
): Record<string, SecretSource> | undefined {
  const entries = Object.entries(wire);
  if (entries.length === 0) return undefined;
  const out: [string, SecretSource][] = [];
  for (const [name, w] of entries) {
    const s = w.source;
    if (s.case === 'env' || s.case === 'file') {
      if (s.value === '') throw new Error(`secret_env ${name}: empty ${s.case}`);
      out.push([name, s.case === 'env' ? { env: s.value } : { file: s.value }]);
    } else if (s.case === 'kubernetes') out.push([name, { kubernetes: { name: s.value.name, key: s.value.key } }]);
    else throw new Error(`secret_env ${name}: a SecretRef with no source (env, file or kubernetes)`);
  }
  return Object.fromEntries(out);
}
