import type { Logger } from 'pino';
import type { AttemptKey } from '../../core/attempt.js';
import { isolateFailures } from '../../db/isolate-failures.js';

export type HeldRef = AttemptKey;

/** What a session gives the buffer: who it is, what it holds, and how to stop what it should not. */
export interface HeartbeatSource {
  agentId: string;
  sessionId: string;
  /** Called after a flush with the held attempts that are no longer current. */
  superseded(refs: HeldRef[]): void;
  /** The database refused this source's keepalive (its values), and only its: end its stream. */
  refused(err: unknown): void;
}

export interface HeartbeatStore {
  /** One UPDATE for every attempt; resolves the ti ids still current. */
  flushHeartbeats(refs: HeldRef[]): Promise<Set<string>>;
  /** One UPDATE for every agent's last-seen time. */
  touchAgents(sessions: { agentId: string; sessionId: string }[]): Promise<void>;
}

/**
 * Keepalives from every agent stream of this replica, turned into heartbeats in batches: each
 * flush is one write for all attempts of all agents and one for the agents' last-seen times,
 * never one write per keepalive. Keepalives are validated before they get here; should the
 * database still refuse a flush for one agent's values, the flush is split until only that agent's
 * keepalive fails, so the others' heartbeats are written.
 */
export class HeartbeatBuffer {
  readonly #pending = new Map<HeartbeatSource, HeldRef[]>();
  #timer: NodeJS.Timeout | null = null;
  #flushing: Promise<void> = Promise.resolve();

  constructor(
    private readonly store: HeartbeatStore,
    private readonly logger: Logger,
    private readonly flushMs: number,
  ) {}

  /** Records a keepalive: these attempts are alive, and so is the agent. */
  note(source: HeartbeatSource, held: HeldRef[]): void {
    this.#pending.set(source, held);
    this.#timer ??= setTimeout(() => void this.flush(), this.flushMs);
  }

  /** A session that ends takes its pending keepalive with it. */
  forget(source: HeartbeatSource): void {
    this.#pending.delete(source);
  }

  flush(): Promise<void> {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
    if (this.#pending.size === 0) return this.#flushing;
    const batch = [...this.#pending];
    this.#pending.clear();
    this.#flushing = this.#flushing.then(() => this.#write(batch));
    return this.#flushing;
  }

  async #write(batch: [HeartbeatSource, HeldRef[]][]): Promise<void> {
    try {
      await isolateFailures(
        batch,
        (part) => this.#writePart(part),
        ([source], err) => {
          this.logger.warn(
            { agentId: source.agentId, err: (err as Error).message },
            `heartbeat of agent ${source.agentId} refused by the database: closing its stream`,
          );
          source.refused(err);
        },
      );
    } catch (err) {
      // Do no harm: a failed flush stops nothing; the next keepalive tries again.
      this.logger.error({ err, agents: batch.length }, 'heartbeat flush failed');
    }
  }

  async #writePart(part: [HeartbeatSource, HeldRef[]][]): Promise<void> {
    const refs = part.flatMap(([, held]) => held);
    const [current] = await Promise.all([
      this.store.flushHeartbeats(refs),
      this.store.touchAgents(part.map(([s]) => ({ agentId: s.agentId, sessionId: s.sessionId }))),
    ]);
    for (const [source, held] of part) {
      const gone = held.filter((r) => !current.has(r.tiId));
      if (gone.length > 0) source.superseded(gone);
    }
  }

  async close(): Promise<void> {
    await this.flush();
  }
}
