/**
 * `leoflow logs 2 | head`: once the reader has gone, the next write fails with EPIPE, emitted as an
 * 'error' on the stream, which nothing else handles (Node ignores SIGPIPE, so the process would die
 * of an uncaught exception with a stack). The output was wanted no further: end at once, with
 * status 0, as `git log | head` does, whatever the command was doing (a followed stream included).
 */
export function endOnClosedOutput(): void {
  for (const stream of [process.stdout, process.stderr]) {
    stream.on('error', (err: NodeJS.ErrnoException) => {
      if (err.code === 'EPIPE') process.exit(0);
      throw err;
    });
  }
}
