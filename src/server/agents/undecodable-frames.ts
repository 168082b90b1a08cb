import { Code, ConnectError } from '@connectrpc/connect';

/**
 * A request stream whose frame that does not decode ends it with INVALID_ARGUMENT, the sender's
 * fault. connect-node throws INTERNAL ("parse binary: …") from the stream's iterator for such a
 * frame, with no option to change it, which would tell a client sending garbage that the server
 * failed. (Unary bodies are checked before their handler: malformed-body.ts.)
 */
export async function* undecodableAsInvalid<T>(requests: AsyncIterable<T>, typeName: string): AsyncGenerator<T> {
  const it = requests[Symbol.asyncIterator]();
  for (;;) {
    let next: IteratorResult<T>;
    try {
      next = await it.next();
    } catch (err) {
      if (err instanceof ConnectError && err.code === Code.Internal && err.rawMessage.startsWith('parse binary: ')) {
        const why = err.rawMessage.slice('parse binary: '.length);
        throw new ConnectError(
          `a message on the stream is not a valid ${typeName} protobuf message (${why})`,
          Code.InvalidArgument,
        );
      }
      throw err;
    }
    if (next.done) return;
    yield next.value;
  }
}
