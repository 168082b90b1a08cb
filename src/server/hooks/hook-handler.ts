/**
 * `POST /hooks/<name>`: a webhook's body made an event (db/external-events/take-event.ts), for
 * systems that cannot speak gRPC. Everything is checked before anything is written: the hook
 * exists, the method, the body's size (read no further than the limit), the signature or the
 * token, the write allowance, the JSON. Each refusal is a 4xx with a JSON `error` naming what is
 * wrong; a delivery answers 200 with the event's id and the runs it started.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import type http from 'node:http';
import type http2 from 'node:http2';
import type { Logger } from 'pino';
import type { WriteActor } from '../../core/actor.js';
import { roleAllows } from '../../core/api-role.js';
import { EVENT_KEY } from '../../core/event-match.js';
import { LIMITS } from '../../core/limits.js';
import { takeEvent } from '../../db/external-events/take-event.js';
import type { Sql } from '../../db/sql.js';
import type { ApiHandler } from '../api/adapter.js';
import { announceTakenEvent } from '../api/announce-taken-event.js';
import { InvalidArgumentError } from '../api/errors.js';
import { parseConf } from '../api/parse-conf.js';
import { peerOf } from '../auth/caller.js';
import type { TokenAuthenticator } from '../auth/token-authenticator.js';
import { bearerToken } from '../auth/token-secret.js';
import type { WriteLimiter } from '../auth/write-limiter.js';
import type { Hook } from '../config/read-hooks.js';

export const HOOKS_PATH = '/hooks/';

type Req = http.IncomingMessage | http2.Http2ServerRequest;
type Res = http.ServerResponse | http2.Http2ServerResponse;

class Refusal extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }
}

export interface HookHandlerOptions {
  hooks: readonly Hook[];
  sql: Sql;
  logger: Logger;
  defaultExecutor: string;
  /** With auth on, a hook without a secret needs a token of role operator. */
  auth: { required: boolean; authenticator: TokenAuthenticator };
  /** The caller's id when auth is off (`local` on loopback). */
  openActor: string;
  writes: WriteLimiter;
  /** An observer replica takes no writes, a delivery included. */
  observer: boolean;
  nudge(runIds: string[]): void;
  refused(hook: string, status: number): void;
}

/** The body, or a 413 as soon as it is past `limit`: a flood is not buffered. */
function readBody(req: Req, limit: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > limit) {
        reject(new Refusal(413, `the body is past the limit of ${limit} bytes`));
        req.removeAllListeners('data');
        req.resume();
        return;
      }
      chunks.push(c);
    });
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

function signatureHolds(hook: Hook, body: Buffer, header: string | undefined): boolean {
  if (!header?.startsWith('sha256=')) return false;
  const given = Buffer.from(header.slice('sha256='.length), 'hex');
  const wanted = createHmac('sha256', hook.secret!).update(body).digest();
  return given.length === wanted.length && timingSafeEqual(given, wanted);
}

const header = (req: Req, name: string): string | undefined => {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
};

/** The handler of `POST /hooks/NAME`: each hook of the --hooks file, by its name. */
export function hookHandler(o: HookHandlerOptions): ApiHandler {
  const byName = new Map(o.hooks.map((h) => [h.name, h]));
  return (req, res) => {
    const raw = (req.url ?? '').split('?', 1)[0]!.slice(HOOKS_PATH.length);
    let name = raw;
    try {
      name = decodeURIComponent(raw);
    } catch {
      // Not percent-encoded properly: no hook has such a name.
    }
    const hook = byName.get(name);
    if (!hook) {
      o.refused('unknown', 404);
      reply(res, 404, { error: `no hook "${name.slice(0, 100)}" (the server's --hooks file names its hooks)` });
      req.resume();
      return;
    }
    deliver(o, req, hook).then(
      (out) => reply(res, 200, out),
      (err: unknown) => {
        if (err instanceof Refusal) {
          o.refused(hook.name, err.status);
          reply(res, err.status, { error: err.message }, err.headers);
          return;
        }
        o.logger.error({ err, hook: hook.name }, 'hook delivery failed');
        reply(res, 500, { error: 'the event could not be stored; deliver it again' });
      },
    );
  };
}

function reply(res: Res, status: number, body: unknown, headers: Record<string, string> = {}): void {
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(JSON.stringify(body) + '\n');
}

/** One delivery to `hook`: its caller checked, its rate, key and body read, its event taken. */
async function deliver(o: HookHandlerOptions, req: Req, hook: Hook): Promise<unknown> {
  if (req.method !== 'POST') throw new Refusal(405, 'a hook takes POST only', { allow: 'POST' });
  if (o.observer) throw new Refusal(403, 'this replica has role observer and takes no writes: send hooks to another');
  const body = await readBody(req, LIMITS.confBytes);
  const by = await callerOfHook(o, req, hook, body);
  const waitMs = o.writes.take(`hook ${hook.name}`);
  if (waitMs !== null)
    throw new Refusal(429, `hook ${hook.name} took more than ${o.writes.perSecond} deliveries a second: retry`, {
      'retry-after': String(Math.ceil(waitMs / 1000)),
    });
  const key = hook.keyHeader ? header(req, hook.keyHeader) : undefined;
  if (key !== undefined && !EVENT_KEY.test(key))
    throw new Refusal(400, `${hook.keyHeader}: must be 1-200 characters of letters, digits and _ . : + -`);
  let payload: Record<string, unknown>;
  try {
    payload = parseConf(body.toString('utf8'), 'body');
  } catch (err) {
    if (err instanceof InvalidArgumentError) throw new Refusal(400, err.message);
    throw err;
  }
  const taken = await takeEvent(o.sql, {
    name: hook.event,
    key: key ?? `hook__${hook.name}__${Date.now()}__${Math.random().toString(36).slice(2, 10)}`,
    payload,
    by,
    defaultExecutor: o.defaultExecutor,
  });
  announceTakenEvent(taken, by, o, {
    fields: { hook: hook.name, event: hook.event },
    message: 'event received by hook',
  });
  return {
    event_id: taken.id,
    duplicate: taken.duplicate,
    runs: taken.runs.map((r) => ({ run_id: r.id, dag_id: r.dag_id })),
  };
}

/** Who delivers: the hook itself when its signature holds, else a token's holder (auth on) or the open actor. */
async function callerOfHook(o: HookHandlerOptions, req: Req, hook: Hook, body: Buffer): Promise<WriteActor> {
  const peer = peerOf(req);
  if (hook.secret) {
    if (!signatureHolds(hook, body, header(req, hook.signatureHeader)))
      throw new Refusal(401, `${hook.signatureHeader}: missing, or not sha256=<hex> of the body with the hook's key`);
    return { id: `hook:${hook.name}`, peer };
  }
  if (o.auth.required) {
    const secret = bearerToken(header(req, 'authorization') ?? null);
    if (secret === null) throw new Refusal(401, 'this hook needs an API token: send "authorization: Bearer <token>"');
    const who = await o.auth.authenticator.authenticate(secret);
    if (!who.ok) throw new Refusal(401, who.reason);
    if (!roleAllows(who.token.role, 'operator'))
      throw new Refusal(403, `a hook needs role operator or above; token "${who.token.id}" has role ${who.token.role}`);
    return { id: who.token.id, peer };
  }
  return { id: o.openActor, peer };
}
