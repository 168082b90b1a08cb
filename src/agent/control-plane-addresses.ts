/**
 * The control-plane addresses an agent dials, in turn: those it was given (`--server`, kept for
 * ever) and those the control plane told it (every live replica at Welcome, where to go at
 * Reconnect). What a Welcome lists replaces what was learned before, so a replica that is gone
 * costs one failed try at most, until the next Welcome forgets it. An agent given one address
 * thus follows its control plane from replica to replica as they stop and start.
 */
export class ControlPlaneAddresses {
  readonly #given: readonly string[];
  #learned: string[] = [];
  /** Index in `all()` of the address the next stream goes to. */
  #next = 0;

  constructor(given: readonly string[]) {
    if (given.length === 0) throw new RangeError('an agent needs at least one control-plane address');
    this.#given = given;
  }

  /** Every address, the given ones first. */
  all(): string[] {
    return [...this.#given, ...this.#learned];
  }

  get size(): number {
    return this.#given.length + this.#learned.length;
  }

  /** Where the next stream goes. */
  current(): string {
    return this.all()[this.#next]!;
  }

  /** The stream ended: the next one goes to the next address, so one that is gone costs one try. */
  advance(): void {
    this.#next = (this.#next + 1) % this.size;
  }

  /** A Welcome's list of live replicas: it replaces what was learned before. */
  learn(urls: readonly string[]): void {
    const at = origin(this.current());
    this.#learned = this.#usable(urls);
    const i = this.all().findIndex((u) => origin(u) === at);
    this.#next = i >= 0 ? i : 0;
  }

  /**
   * A Reconnect named where to go: the next stream goes to the first of `urls` that is not the
   * address just left. False, and nothing moved, when it named none usable (the caller then takes
   * the next address in turn).
   */
  goTo(urls: readonly string[]): boolean {
    const left = origin(this.current());
    for (const u of this.#usable(urls)) if (!this.#learned.includes(u)) this.#learned.push(u);
    const known = this.all().map(origin);
    const to = urls.map(origin).find((u) => u !== null && u !== left && known.includes(u));
    if (to === undefined) return false;
    this.#next = known.indexOf(to);
    return true;
  }

  /**
   * Of `urls`, those not given already and of a scheme the agent was given: an agent set up for
   * TLS never learns a plain http:// address, nor one set up for plain HTTP an https:// one.
   */
  #usable(urls: readonly string[]): string[] {
    const given = this.#given.map(origin);
    const schemes = new Set(this.#given.map((u) => new URL(u).protocol));
    const out: string[] = [];
    for (const raw of urls) {
      const url = origin(raw);
      if (url === null || !schemes.has(new URL(url).protocol) || given.includes(url) || out.includes(url)) continue;
      out.push(url);
    }
    return out;
  }
}

/** `http://host:port` of a URL (null when it is not one), so one address is one entry however written. */
function origin(raw: string): string | null {
  try {
    const u = new URL(raw);
    return u.protocol === 'http:' || u.protocol === 'https:' ? u.origin : null;
  } catch {
    return null;
  }
}
