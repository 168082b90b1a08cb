/**
 * An unbounded queue read as an async iterable: the outbound half of a stream, fed from several
 * places (replies, assignments, cancels) and drained by the handler's generator.
 */
export class AsyncQueue<T> implements AsyncIterable<T> {
  readonly #items: T[] = [];
  #waiter: (() => void) | null = null;
  #closed = false;
  #error: unknown = null;

  push(item: T): boolean {
    if (this.#closed) return false;
    this.#items.push(item);
    this.#wake();
    return true;
  }

  /** Ends the iteration after the queued items; with an error, ends it by throwing that. */
  close(error?: unknown): void {
    if (this.#closed) return;
    this.#closed = true;
    if (error !== undefined) this.#error = error;
    this.#wake();
  }

  get closed(): boolean {
    return this.#closed;
  }

  #wake(): void {
    const w = this.#waiter;
    this.#waiter = null;
    w?.();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<T> {
    for (;;) {
      if (this.#items.length > 0) {
        yield this.#items.shift()!;
        continue;
      }
      if (this.#closed) {
        if (this.#error !== null) throw this.#error;
        return;
      }
      await new Promise<void>((r) => (this.#waiter = r));
    }
  }
}
