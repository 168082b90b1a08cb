/**
 * Runs of each DAG that `db clean` keeps unless told otherwise: its latest finished one, as
 * `airflow db clean` does, so a clean never leaves a DAG without its last outcome (what `run list`
 * and a dashboard show of it). More than MAX_KEEP_LAST is a history, which `--before` keeps.
 * Here, not in the server's clean-history, so that the CLI checks the flag without loading it.
 */
export const DEFAULT_KEEP_LAST = 1;
export const MAX_KEEP_LAST = 10_000;
