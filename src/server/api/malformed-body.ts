/**
 * Garbage in a request body, told as the caller's fault. connect-node reports a protobuf body
 * that does not decode as INTERNAL ("parse binary", in its serialization), before any interceptor
 * runs, and has no option to change that. So the body of a checked method is decoded here first,
 * on its way in: a message that does not decode is replaced by an empty one and the reason is
 * put in the request's context, where the request check ({@link throwIfMalformed}) refuses it
 * with INVALID_ARGUMENT before its handler sees it. A compressed message is decompressed here
 * to be checked, since connect-node's INTERNAL comes after its own decompression. JSON bodies need
 * none of this: connect-node already answers INVALID_ARGUMENT for them.
 */
import { fromBinary, type DescMessage } from '@bufbuild/protobuf';
import { Code, ConnectError, createContextKey, type ContextValues } from '@connectrpc/connect';
import { decompressMessage, emptyIn } from './decompress-message.js';

/** Why the request's last message did not decode, if it did not. */
export const malformedBody = createContextKey<string | undefined>(undefined, {
  description: 'why the request body did not decode',
});

/** Flags of an envelope (gRPC, gRPC-Web, Connect streaming): compressed, or end of stream. */
const COMPRESSED = 0x01;
const END_STREAM = 0x02;

function decodes(input: DescMessage, bytes: Uint8Array, values: ContextValues): boolean {
  try {
    fromBinary(input, bytes);
    return true;
  } catch (err) {
    values.set(malformedBody, `is not a valid ${input.typeName} protobuf message (${(err as Error).message})`);
    return false;
  }
}

/**
 * Whether a message decodes, decompressing it first when it says it is compressed (`encoding`,
 * from the header of its protocol). Undefined: left to connect-node (an unknown encoding, a
 * message past `maxBytes` once decompressed).
 */
async function checks(
  input: DescMessage,
  bytes: Uint8Array,
  encoding: string | null,
  values: ContextValues,
  maxBytes: number,
): Promise<boolean | undefined> {
  if (encoding === null) return decodes(input, bytes, values);
  const d = await decompressMessage(encoding, bytes, maxBytes);
  if (d.kind === 'unchecked') return undefined;
  if (d.kind === 'bytes') return decodes(input, d.bytes, values);
  values.set(malformedBody, d.why);
  return false;
}

/**
 * The body of a request to a checked method, with each message that does not decode (or does not
 * decompress) replaced by an empty one. `encoding` is the compression the protocol's header names
 * (`content-encoding` for Connect unary, `grpc-encoding`, `connect-content-encoding`), or
 * 'identity'. A message past `maxBytes` (the adapter's `readMaxBytes`) is passed on as it is, for
 * connect-node to refuse for its size.
 */
export async function* checkedBody(
  body: AsyncIterable<Uint8Array>,
  o: { contentType: string; encoding: string; input: DescMessage; values: ContextValues; maxBytes: number },
): AsyncIterable<Uint8Array> {
  const { contentType, input, values, maxBytes } = o;
  const encoding = o.encoding.trim().toLowerCase() || 'identity';
  const type = contentType.split(';')[0]?.trim().toLowerCase() ?? '';
  const binary =
    type === 'application/proto' ||
    type.endsWith('+proto') ||
    type === 'application/grpc' ||
    type === 'application/grpc-web';
  if (!binary) return yield* body;
  if (type === 'application/proto') {
    // Connect unary: the body is the message itself, compressed whole when `encoding` says so.
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const c of body) {
      chunks.push(Buffer.from(c));
      size += c.byteLength;
      if (size > maxBytes) {
        yield Buffer.concat(chunks);
        return yield* body;
      }
    }
    const bytes = Buffer.concat(chunks);
    const ok = await checks(input, bytes, encoding === 'identity' ? null : encoding, values, maxBytes);
    yield ok !== false ? bytes : encoding === 'identity' ? new Uint8Array(0) : emptyIn(encoding);
    return;
  }
  let buf = Buffer.alloc(0);
  for await (const c of body) {
    buf = buf.length === 0 ? Buffer.from(c) : Buffer.concat([buf, c]);
    while (buf.length >= 5) {
      const flags = buf[0]!;
      const length = buf.readUInt32BE(1);
      if (length > maxBytes) {
        yield buf;
        return yield* body;
      }
      if (buf.length < 5 + length) break;
      const message = buf.subarray(5, 5 + length);
      // An envelope's own flag says whether it is compressed, with the stream's encoding.
      const ok =
        (flags & END_STREAM) !== 0
          ? true
          : await checks(input, message, (flags & COMPRESSED) !== 0 ? encoding : null, values, maxBytes);
      // A replacement is an empty message, uncompressed (legal whatever the stream's encoding).
      yield ok !== false ? buf.subarray(0, 5 + length) : Buffer.from([flags & ~COMPRESSED, 0, 0, 0, 0]);
      buf = buf.subarray(5 + length);
    }
  }
  // A cut envelope is connect-node's to report.
  if (buf.length > 0) yield buf;
}

/** Refuses the request if the message it sent last did not decode. */
export function throwIfMalformed(values: ContextValues): void {
  const why = values.get(malformedBody);
  if (why !== undefined) throw new ConnectError(`request: ${why}`, Code.InvalidArgument);
}
