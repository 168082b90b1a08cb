import type { Logger } from 'pino';
import type { Sql } from '../../db/sql.js';
import { recordDelivery } from '../../db/notify-out/record-delivery.js';
import { takeDueNotifications, type DueNotification } from '../../db/notify-out/take-due-notifications.js';
import { notificationBody } from './notification-body.js';
import type { NotifySettings } from '../config/read-notify-file.js';

export interface DelivererOptions {
  sql: Sql;
  logger: Logger;
  settings: NotifySettings;
  /** Told of each delivery's outcome (metrics). */
  delivered?(outcome: 'delivered' | 'retry' | 'failed'): void;
  /** Between looks for due notifications. */
  pollMs?: number;
  /** The first retry's wait; each next one doubles, up to `MAX_RETRY_MS`. */
  retryBaseMs?: number;
}

/** Deliveries a notification gets at most; then it is failed, and `notifications list` says why. */
export const MAX_DELIVERIES = 10;
const MAX_RETRY_MS = 10 * 60_000;
/** A receiver that has not answered in this long is counted as a failed delivery. */
export const DELIVERY_TIMEOUT_MS = 10_000;
/** Held by one deliverer while it posts: past it, another replica's takes the notification again. */
const LEASE_MS = 3 * DELIVERY_TIMEOUT_MS;
/** Posts at once, at most. */
const BATCH = 8;

/**
 * Posts the notifications the database holds (written with the changes they tell of, migration
 * 027) to their receivers, retrying with backoff, and records every attempt. It runs apart from
 * the scheduler on every replica, on its own timer and its own requests, so a slow or failing
 * receiver never holds up a step; replicas share the work by lease (take-due-notifications.ts).
 */
export class NotificationDeliverer {
  readonly #o: DelivererOptions;
  #timer: NodeJS.Timeout | null = null;
  #round: Promise<void> | null = null;
  #stopped = false;

  constructor(o: DelivererOptions) {
    this.#o = o;
  }

  start(): void {
    const tick = () => {
      if (this.#stopped) return;
      this.#round ??= this.#deliverDue()
        .catch((err: unknown) => this.#o.logger.warn({ err }, 'notifications: could not take due ones'))
        .finally(() => {
          this.#round = null;
          // Unref'd: the replica's stop ends it (stop-replica.ts), never its timer keeping a process up.
          if (!this.#stopped) this.#timer = setTimeout(tick, this.#o.pollMs ?? 1000).unref();
        });
    };
    tick();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#timer) clearTimeout(this.#timer);
    await this.#round;
  }

  async #deliverDue(): Promise<void> {
    for (;;) {
      const due = await takeDueNotifications(this.#o.sql, BATCH, LEASE_MS);
      await Promise.all(due.map((n) => this.#deliver(n)));
      if (due.length < BATCH || this.#stopped) return;
    }
  }

  async #deliver(n: DueNotification): Promise<void> {
    const receiver = this.#o.settings.receivers.get(n.receiver);
    const started = performance.now();
    let status: number | null = null;
    let error: string | null = null;
    if (!receiver) {
      const known = [...this.#o.settings.receivers.keys()].join(', ') || 'none';
      error = `no receiver "${n.receiver}" in this replica's --notify file (receivers: ${known})`;
    } else {
      try {
        const res = await fetch(receiver.url, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'leoflow-notification-id': n.id },
          body: JSON.stringify(notificationBody(n, receiver.format)),
          signal: AbortSignal.timeout(DELIVERY_TIMEOUT_MS),
          redirect: 'error',
        });
        status = res.status;
        // The answer's body is not needed; reading it frees the connection.
        await res.arrayBuffer().catch(() => undefined);
        if (!res.ok) error = `the receiver answered HTTP ${res.status}`;
      } catch (err) {
        error = deliveryError(err);
      }
    }
    const delivered = error === null;
    const retryInMs =
      delivered || n.attempt >= MAX_DELIVERIES
        ? null
        : Math.min(MAX_RETRY_MS, (this.#o.retryBaseMs ?? 1000) * 2 ** (n.attempt - 1));
    const outcome = delivered ? 'delivered' : retryInMs === null ? 'failed' : 'retry';
    this.#o.delivered?.(outcome);
    if (!delivered)
      this.#o.logger.warn(
        { notification: n.id, runId: n.run_id, receiver: n.receiver, attempt: n.attempt, error, retryInMs },
        `notification ${n.id} (${n.kind} of run ${n.run_id}) not delivered to ${n.receiver}: ${error}`,
      );
    await recordDelivery(this.#o.sql, {
      id: n.id,
      attempt: n.attempt,
      status,
      error,
      ms: performance.now() - started,
      delivered,
      retryInMs,
    });
  }
}

/** Why a post got no answer, in words (never the URL: it is the receiver's credential). */
function deliveryError(err: unknown): string {
  if (err instanceof Error && (err.name === 'TimeoutError' || err.name === 'AbortError'))
    return `no answer within ${DELIVERY_TIMEOUT_MS} ms`;
  const cause = err instanceof Error && err.cause instanceof Error ? err.cause : err;
  const code = (cause as { code?: string }).code;
  return code ? `could not reach the receiver (${code})` : `could not reach the receiver: ${String(cause)}`;
}
