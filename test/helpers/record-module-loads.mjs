// Preloaded into a child process (`node --import <this file>`) to record every module it loads,
// one URL a line, in the file LEOFLOW_MODULE_LOG names: ES modules through a load hook (Node's
// module customization hooks, run on a thread of their own), CommonJS ones from require.cache at
// exit. For tests of what a command loads (test/e2e/cli-module-loads.test.ts).
import { appendFileSync } from 'node:fs';
import { createRequire, register } from 'node:module';
import { pathToFileURL } from 'node:url';
import { isMainThread } from 'node:worker_threads';

let logFile;

/** In the hooks thread: where to write, from register()'s data. */
export function initialize(data) {
  logFile = data.logFile;
}

export async function load(url, context, nextLoad) {
  appendFileSync(logFile, `${url}\n`);
  return nextLoad(url, context);
}

if (isMainThread && process.env.LEOFLOW_MODULE_LOG) {
  const file = process.env.LEOFLOW_MODULE_LOG;
  register(import.meta.url, { data: { logFile: file } });
  const cache = createRequire(import.meta.url).cache;
  process.on('exit', () => {
    const urls = Object.keys(cache).map((p) => pathToFileURL(p).href);
    if (urls.length > 0) appendFileSync(file, `${urls.join('\n')}\n`);
  });
}
