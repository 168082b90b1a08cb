/**
 * The webhooks a replica serves (`--hooks FILE`): each `POST /hooks/<name>` turns a plain JSON body
 * from a system that cannot speak gRPC into an event (SendEvent). A hook is authenticated by an
 * HMAC-SHA256 signature of the body with its secret (GitHub's `X-Hub-Signature-256: sha256=<hex>`),
 * or, without a secret, by an API token of role operator as every write is. The file is read and
 * its secrets resolved at start, so a missing one stops the start, not the first delivery.
 */
import { readFileSync } from 'node:fs';
import { parse } from 'yaml';
import { EVENT_NAME, EVENT_NAME_RULE } from '../../core/event-match.js';
import { readSecretSetting } from './read-secret-setting.js';

export interface Hook {
  /** The path's last part: `/hooks/<name>`. */
  name: string;
  /** The event it becomes. */
  event: string;
  /** The HMAC key; null: the caller needs an API token (of role operator, when auth is on). */
  secret: Buffer | null;
  /** The header with `sha256=<hex of HMAC-SHA256(secret, body)>` (lower case, as Node reads headers). */
  signatureHeader: string;
  /** The header naming the sender's id of a delivery (a redelivery starts nothing twice); null: none. */
  keyHeader: string | null;
}

const HOOK_KEYS = ['name', 'event', 'secret', 'signature_header', 'key_header'];
const HEADER = /^[A-Za-z0-9-]{1,100}$/;
const HOOK_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$/;
/** A shorter HMAC key is guessable; GitHub's own guidance is a high-entropy string. */
const MIN_SECRET_BYTES = 16;

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

function secretOf(v: unknown, at: string, cwd: string): Buffer {
  const value = readSecretSetting(v, at, cwd, 'HMAC key');
  if (Buffer.byteLength(value) < MIN_SECRET_BYTES)
    throw new Error(`${at}: the key must be at least ${MIN_SECRET_BYTES} bytes, got ${Buffer.byteLength(value)}`);
  return Buffer.from(value);
}

/** The hooks of the file at `file` (YAML: `hooks: [...]`), checked; throws naming the field at fault. */
export function readHooks(file: string, cwd: string): Hook[] {
  let doc: unknown;
  try {
    doc = parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new Error(
      `cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message.split('\n')[0]}`,
    );
  }
  if (!isObj(doc) || !Array.isArray(doc.hooks)) throw new Error(`${file}: expected a mapping with a list \`hooks\``);
  const seen = new Set<string>();
  return doc.hooks.map((h, i) => {
    const at = `${file}: hooks[${i}]`;
    if (!isObj(h)) throw new Error(`${at} must be a mapping (${HOOK_KEYS.join(', ')})`);
    for (const k of Object.keys(h))
      if (!HOOK_KEYS.includes(k)) throw new Error(`${at}.${k}: unknown key; allowed: ${HOOK_KEYS.join(', ')}`);
    if (typeof h.name !== 'string' || !HOOK_NAME.test(h.name))
      throw new Error(`${at}.name must be 1-100 letters, digits, _ . -, starting with a letter or digit`);
    if (seen.has(h.name)) throw new Error(`${at}.name: "${h.name}" is named twice`);
    seen.add(h.name);
    const event = h.event ?? h.name;
    if (typeof event !== 'string' || !EVENT_NAME.test(event)) throw new Error(`${at}.event must be ${EVENT_NAME_RULE}`);
    const header = (v: unknown, key: string, fallback: string | null): string | null => {
      if (v === undefined) return fallback;
      if (typeof v !== 'string' || !HEADER.test(v)) throw new Error(`${at}.${key} must be an HTTP header name`);
      return v.toLowerCase();
    };
    return {
      name: h.name,
      event,
      secret: h.secret === undefined ? null : secretOf(h.secret, `${at}.secret`, cwd),
      signatureHeader: header(h.signature_header, 'signature_header', 'x-hub-signature-256')!,
      keyHeader: header(h.key_header, 'key_header', null),
    };
  });
}
