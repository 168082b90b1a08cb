/** An async queue usable both as a request stream and as an inbox with `next()`. */
export class AsyncInbox<T> implements AsyncIterable<T> {
  readonly #items: T[] = [];
  readonly #waiters: { resolve: (v: T) => void; reject: (e: unknown) => void }[] = [];
  #closed = false;
  #error: unknown = undefined;
  #iterWaiter: (() => void) | null = null;

  push(item: T): void {
    const w = this.#waiters.shift();
    if (w) w.resolve(item);
    else this.#items.push(item);
    this.#iterWaiter?.();
  }

  close(error?: unknown): void {
    this.#closed = true;
    this.#error = error;
    for (const w of this.#waiters.splice(0)) w.reject(error ?? new Error('closed'));
    this.#iterWaiter?.();
  }

  /** The next item, waiting up to `timeoutMs`. */
  next(timeoutMs = 10_000): Promise<T> {
    if (this.#items.length > 0) return Promise.resolve(this.#items.shift()!);
    if (this.#closed) return Promise.reject(this.#error ?? new Error('closed'));
    return new Promise<T>((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`nothing received within ${timeoutMs} ms`)), timeoutMs);
      this.#waiters.push({ resolve: (v) => (clearTimeout(t), resolve(v)), reject: (e) => (clearTimeout(t), reject(e)) });
    });
  }

  async *[Symbol.asyncIterator](): AsyncIterator<T> {
    for (;;) {
      if (this.#items.length > 0) {
        yield this.#items.shift()!;
        continue;
      }
      if (this.#closed) return;
      await new Promise<void>((r) => (this.#iterWaiter = r));
      this.#iterWaiter = null;
    }
  }
}

