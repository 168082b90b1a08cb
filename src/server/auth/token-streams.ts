import { Code, ConnectError } from '@connectrpc/connect';

/** Node's timers hold at most 2^31−1 ms; a later expiry is checked again when this one fires. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * The long-lived streams this replica serves on the strength of an API token (watchers, log
 * follows, agent streams), by token id, so that revoking a token ends them at once and a token
 * that expires ends them when it does. A token is checked when a call starts; without this, a
 * stream opened before a revocation would go on for as long as the client liked.
 */
export class TokenStreams {
  readonly #open = new Map<string, Set<(err: ConnectError) => void>>();
  /** Streams a revocation's notification ended, by token, not yet counted by the call that revoked. */
  readonly #cutEarlier = new Map<string, number>();

  /** `max`: the open streams one token may hold (`--max-token-streams`). */
  constructor(readonly max: number = Infinity) {}

  /**
   * Throws RESOURCE_EXHAUSTED when this token holds its limit of streams already: one client's
   * flood of watches or agent streams costs that client alone. Checked before a stream opens.
   */
  admit(tokenId: string): void {
    const n = this.#open.get(tokenId)?.size ?? 0;
    if (n >= this.max) {
      const why = `API token "${tokenId}" holds ${n} open streams, the limit (--max-token-streams ${this.max}): close some first`;
      throw new ConnectError(why, Code.ResourceExhausted);
    }
  }

  /** Registers a stream; `cut` ends it with the error given. Returns the call that unregisters it. */
  open(token: { id: string; expires_at: Date | null }, cut: (err: ConnectError) => void): () => void {
    let set = this.#open.get(token.id);
    if (!set) this.#open.set(token.id, (set = new Set()));
    set.add(cut);
    let timer: NodeJS.Timeout | null = null;
    const arm = () => {
      const ms = token.expires_at!.getTime() - Date.now();
      if (ms <= 0)
        return cut(
          new ConnectError(
            `API token "${token.id}" expired at ${token.expires_at!.toISOString()}`,
            Code.Unauthenticated,
          ),
        );
      timer = setTimeout(arm, Math.min(ms, MAX_TIMER_MS));
      timer.unref();
    };
    if (token.expires_at) arm();
    return () => {
      if (timer) clearTimeout(timer);
      set.delete(cut);
      if (set.size === 0 && this.#open.get(token.id) === set) this.#open.delete(token.id);
    };
  }

  /**
   * Ends every stream of this token (it was revoked: told by the revocation's notification);
   * resolves how many there were. The count is kept a minute for `revokedHere`: on the replica
   * that revoked, the notification can come back before the revoking call counts.
   */
  revoked(tokenId: string): number {
    const n = this.#cut(tokenId);
    if (n > 0) {
      this.#cutEarlier.set(tokenId, (this.#cutEarlier.get(tokenId) ?? 0) + n);
      setTimeout(() => this.#cutEarlier.delete(tokenId), 60_000).unref();
    }
    return n;
  }

  /** The revoking call's own: ends the token's streams, and counts those its notification ended already. */
  revokedHere(tokenId: string): number {
    const earlier = this.#cutEarlier.get(tokenId) ?? 0;
    this.#cutEarlier.delete(tokenId);
    return earlier + this.#cut(tokenId);
  }

  #cut(tokenId: string): number {
    const set = this.#open.get(tokenId);
    if (!set) return 0;
    this.#open.delete(tokenId);
    const err = new ConnectError(`API token "${tokenId}" was revoked`, Code.Unauthenticated);
    for (const cut of set) cut(err);
    return set.size;
  }
}

/**
 * A response stream that ends with the error `cut` is given, at once, even while the handler
 * waits for its next message (a watcher of a quiet run waits for minutes).
 */
export async function* cuttable<T>(
  messages: AsyncIterable<T>,
  register: (cut: (err: ConnectError) => void) => () => void,
): AsyncGenerator<T> {
  let fail: ((err: ConnectError) => void) | null = null;
  let cutErr: ConnectError | null = null;
  const cutP = new Promise<never>((_, reject) => {
    fail = reject;
  });
  cutP.catch(() => {});
  const unregister = register((err) => {
    cutErr = err;
    fail!(err);
  });
  const it = messages[Symbol.asyncIterator]();
  try {
    for (;;) {
      if (cutErr) throw cutErr;
      const next = await Promise.race([it.next(), cutP]);
      if (next.done) return;
      yield next.value;
    }
  } finally {
    unregister();
    // Ends the handler's generator too (its finally blocks close the watch).
    void it.return?.(undefined)?.catch?.(() => {});
  }
}
