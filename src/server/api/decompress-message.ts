import { promisify } from 'node:util';
import zlib from 'node:zlib';

const gunzip = promisify(zlib.gunzip);
const brotliDecompress = promisify(zlib.brotliDecompress);

/** What a compressed message turned out to be. */
export type Decompressed =
  | { kind: 'bytes'; bytes: Uint8Array }
  /** Not valid data of its encoding: the caller's error. */
  | { kind: 'corrupt'; why: string }
  /** An encoding we do not know, or past `maxBytes` once decompressed: connect-node's to refuse. */
  | { kind: 'unchecked' };

/**
 * A request message in one of the encodings the API accepts (gzip, br), decompressed so it can be
 * checked before connect-node sees it; never more than `maxBytes` of output (a small bomb stays
 * small), and off the event loop's thread.
 */
export async function decompressMessage(encoding: string, bytes: Uint8Array, maxBytes: number): Promise<Decompressed> {
  const inflate = encoding === 'gzip' ? gunzip : encoding === 'br' ? brotliDecompress : null;
  if (!inflate) return { kind: 'unchecked' };
  try {
    return {
      kind: 'bytes',
      bytes: await inflate(bytes, { maxOutputLength: Math.max(1, Math.min(maxBytes, 0x7fffffff)) }),
    };
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE' || err instanceof RangeError)
      return { kind: 'unchecked' };
    return { kind: 'corrupt', why: `does not decompress as ${encoding} (${(err as Error).message})` };
  }
}

/** An empty message in `encoding`, for a unary body whose header says it is compressed. */
export function emptyIn(encoding: string): Uint8Array {
  return encoding === 'br' ? zlib.brotliCompressSync(new Uint8Array(0)) : zlib.gzipSync(new Uint8Array(0));
}
