import { afterAll, beforeAll } from 'vitest';

/**
 * Fails a test file that leaves a child process, a listening server or an open connection
 * behind (graphile-worker checks the same after each test). Checked when the file ends, not
 * after each test: many files start one server in `beforeAll` and share it. What the test
 * runner itself holds is counted before the file starts and left out.
 */
const WATCHED = ['ProcessWrap', 'TCPServerWrap', 'TCPSocketWrap', 'TCPWRAP', 'Http2Session'];
/** Sockets and processes being closed may take a moment to leave the list. */
const GRACE_MS = 3000;

function count(): Map<string, number> {
  const counts = new Map<string, number>();
  for (const kind of process.getActiveResourcesInfo())
    if (WATCHED.includes(kind)) counts.set(kind, (counts.get(kind) ?? 0) + 1);
  return counts;
}

let before = new Map<string, number>();

beforeAll(() => {
  before = count();
});

afterAll(async () => {
  const deadline = Date.now() + GRACE_MS;
  for (;;) {
    const leaked = [...count()]
      .filter(([kind, n]) => n > (before.get(kind) ?? 0))
      .map(([kind, n]) => `${n - (before.get(kind) ?? 0)} ${kind}`);
    if (leaked.length === 0) return;
    if (Date.now() > deadline)
      throw new Error(
        `this test file left behind: ${leaked.join(', ')} (close every server, connection and process it starts)`,
      );
    await new Promise((r) => setTimeout(r, 50));
  }
});
