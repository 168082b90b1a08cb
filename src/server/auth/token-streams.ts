import { Code, ConnectError } from '@connectrpc/connect';

/** Node's timers hold at most 2^31−1 ms; a later expiry is checked again when this one fires. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** The kinds of stream a token's bound counts apart: a dashboard's watches cannot starve its agents. */
export type StreamKind = 'watch' | 'follow' | 'agent';

/** Each kind's bound, and the setting that sets it. */
export const STREAM_LIMIT_FLAGS: Readonly<Record<StreamKind, string>> = {
  watch: '--max-token-watches',
  follow: '--max-token-follows',
  agent: '--max-token-streams',
};

const KIND_NAMES: Readonly<Record<StreamKind, string>> = {
  watch: 'watch streams (WatchRun, WatchRuns, WatchCleanHistory)',
  follow: 'log follows (TailLogs)',
  agent: 'agent streams',
};

/**
 * The long-lived streams this replica serves on the strength of an API token (watchers, log
 * follows, agent streams), by token id, so that revoking a token ends them at once and a token
 * that expires ends them when it does. A token is checked when a call starts; without this, a
 * stream opened before a revocation would go on for as long as the client liked.
 */
export class TokenStreams {
  readonly #open = new Map<string, Set<(err: ConnectError) => void>>();
  /** Open streams by token and kind, for the bounds. */
  readonly #counts = new Map<string, number>();
  /** Streams a revocation's notification ended, by token, not yet counted by the call that revoked. */
  readonly #cutEarlier = new Map<string, number>();

  /** `max`: the open streams of each kind one token may hold (STREAM_LIMIT_FLAGS). */
  constructor(
    readonly max: Readonly<Record<StreamKind, number>> = { watch: Infinity, follow: Infinity, agent: Infinity },
  ) {}

  /**
   * Throws RESOURCE_EXHAUSTED when this token holds its limit of streams of this kind already: one
   * client's flood of watches costs that client alone (each event a watch gets is work for the
   * server, so a token's watches multiply its writes), and its agents still connect. Checked
   * before a stream opens.
   */
  admit(tokenId: string, kind: StreamKind): void {
    const n = this.#counts.get(`${kind}:${tokenId}`) ?? 0;
    if (n >= this.max[kind]) {
      const why =
        `API token "${tokenId}" holds ${n} open ${KIND_NAMES[kind]}, the limit ` +
        `(${STREAM_LIMIT_FLAGS[kind]} ${this.max[kind]}): close some first`;
      throw new ConnectError(why, Code.ResourceExhausted);
    }
  }

  /** Registers a stream; `cut` ends it with the error given. Returns the call that unregisters it. */
  open(token: { id: string; expires_at: Date | null }, kind: StreamKind, cut: (err: ConnectError) => void): () => void {
    let set = this.#open.get(token.id);
    if (!set) this.#open.set(token.id, (set = new Set()));
    set.add(cut);
    const key = `${kind}:${token.id}`;
    this.#counts.set(key, (this.#counts.get(key) ?? 0) + 1);
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
    let closed = false;
    return () => {
      if (timer) clearTimeout(timer);
      if (!closed) {
        closed = true;
        const left = (this.#counts.get(key) ?? 1) - 1;
        if (left > 0) this.#counts.set(key, left);
        else this.#counts.delete(key);
      }
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
