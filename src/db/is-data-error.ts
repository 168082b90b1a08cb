/**
 * Whether an error is one a row's own values cause, decided by code, never by message text:
 * SQLSTATE class 22 (data exception, e.g. a text that is not a uuid, a number out of range) and
 * 23 (integrity constraint violation). The other rows of a batch that failed so are not at fault.
 */
const DATA_ERROR_CLASSES = ['22', '23'];

export function isDataError(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && code.length === 5 && DATA_ERROR_CLASSES.includes(code.slice(0, 2));
}
