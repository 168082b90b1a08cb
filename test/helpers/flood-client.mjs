// One token's flood, in a process of its own (the flood test runs it at nice 19, so the shared
// cores time the server's cost of it, not the flooder's own): writes from 8 connections, as fast
// as they are answered, and `streams` watch and tail follows. Prints what it got, then exits.
// Usage: node flood-client.mjs URL SECRET RUN_ID MS STREAMS PARTS
import { Code, ConnectError } from '@connectrpc/connect';
import { createClients } from '../../dist/cli/client.js';

const [url, secret, runId, ms, streamCount, parts] = process.argv.slice(2);
const stop = new AbortController();
const clients = Array.from({ length: 8 }, () => createClients(url, null, secret));
const codes = {};
let writesLetIn = 0;
const count = (err) => {
  const code = Code[ConnectError.from(err).code];
  codes[code] = (codes[code] ?? 0) + 1;
};
const writers = clients.map(async (c) => {
  while (!stop.signal.aborted && parts.includes('writes'))
    await Promise.all(
      Array.from({ length: 20 }, () => c.workflow.triggerRun({ dagId: 'flood' }).then(() => writesLetIn++, count)),
    );
});
let streamsOpen = 0;
const streams = Array.from({ length: parts.includes('streams') ? Number(streamCount) : 0 }, async (_, i) => {
  const c = clients[i % clients.length];
  const it =
    i % 2 === 0
      ? c.workflow.watchRuns({}, { signal: stop.signal })
      : c.workflow.tailLogs({ runId, follow: true }, { signal: stop.signal });
  streamsOpen++;
  try {
    for await (const _ of it) void _;
  } catch (err) {
    if (!stop.signal.aborted) count(err);
  } finally {
    streamsOpen--;
  }
});
setTimeout(() => stop.abort(), Number(ms));
await Promise.allSettled([...writers, ...streams]);
process.stdout.write(`${JSON.stringify({ writesLetIn, codes, streamsOpen })}\n`);
process.exit(0);
