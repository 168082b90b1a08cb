import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';

/** Tokens we make start with this, so a leaked one is recognisable (secret scanners, logs). */
export const TOKEN_PREFIX = 'lf_';

/** A new token: 32 random bytes (256 bits) after the prefix, and a short id for lists. */
export function newTokenSecret(): { id: string; secret: string } {
  return { id: randomBytes(6).toString('hex'), secret: `${TOKEN_PREFIX}${randomBytes(32).toString('base64url')}` };
}

/**
 * What is stored of a token. A fast hash is right here, unlike for passwords: the secret is 256
 * random bits, so there is nothing to guess that a slow hash (bcrypt, scrypt) would slow down, and
 * a fast one keeps the check of every call cheap. A database dump gives no usable token.
 */
export function hashTokenSecret(secret: string): Buffer {
  return createHash('sha256').update(secret, 'utf8').digest();
}

/** Compares two secrets (or their hashes) without leaking, by timing, how much of them matched. */
export function secretsEqual(a: string | Buffer, b: string | Buffer): boolean {
  // Hashing first makes both sides 32 bytes, as timingSafeEqual needs, and hides the lengths.
  const ha = createHash('sha256').update(a).digest();
  const hb = createHash('sha256').update(b).digest();
  return timingSafeEqual(ha, hb);
}

/** The token of an `authorization: Bearer <token>` header, or null. */
export function bearerToken(header: string | null): string | null {
  if (header === null) return null;
  const m = /^Bearer\s+(\S+)\s*$/i.exec(header);
  return m ? m[1]! : null;
}
