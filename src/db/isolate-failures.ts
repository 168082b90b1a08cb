import { isDataError } from './is-data-error.js';

/**
 * Writes a batch shared by many senders so that one sender's bad values fail only its own part:
 * `write` the whole; if the database refuses it for a data error, write each half again, down to
 * single items, and hand the items still refused to `guilty`. Halves go in order, so what the
 * batch kept in order stays in order. Any other error (a lost connection, a timeout) is thrown as
 * is, for the caller to retry or fail the whole. One bad item among n costs about 2·log2(n) more
 * statements, and only when it happens.
 */
export async function isolateFailures<T>(
  items: T[],
  write: (part: T[]) => Promise<void>,
  guilty: (item: T, err: unknown) => void,
): Promise<void> {
  if (items.length === 0) return;
  try {
    await write(items);
  } catch (err) {
    if (!isDataError(err)) throw err;
    if (items.length === 1) {
      guilty(items[0]!, err);
      return;
    }
    const mid = Math.ceil(items.length / 2);
    await isolateFailures(items.slice(0, mid), write, guilty);
    await isolateFailures(items.slice(mid), write, guilty);
  }
}
