/**
 * Waiters for a pod to be seen deleted, by `namespace/name`: a retry waits so for its earlier
 * tries' pods, and the watch's DELETED event wakes it.
 */
export class PodGoneWaiters {
  readonly #waiters = new Map<string, ((gone: boolean) => void)[]>();

  /**
   * True once the pod is seen deleted (at once when it is not `present` now); false only when the
   * watches stop (`stopAll`). No timeout: a pod that may still run is waited for until the API
   * server no longer has it.
   */
  whenGone(namespace: string, name: string, present: boolean): Promise<boolean> {
    if (!present) return Promise.resolve(true);
    return new Promise((resolve) => {
      const key = `${namespace}/${name}`;
      const list = this.#waiters.get(key) ?? [];
      list.push(resolve);
      this.#waiters.set(key, list);
    });
  }

  /** The pod `namespace/name` was deleted: its waiters are told. */
  gone(key: string): void {
    for (const w of this.#waiters.get(key) ?? []) w(true);
    this.#waiters.delete(key);
  }

  /** Every waiter told false at once: the watches stop (the lead lost, shutdown), so no delete will be seen. */
  stopAll(): void {
    for (const list of this.#waiters.values()) for (const w of list) w(false);
    this.#waiters.clear();
  }
}
