// Whether an address is reachable from this machine only: the one fact auth's defaults and the
// `--insecure` warning both depend on.

/** True for an address only this machine can reach (where Lite may run without auth). */
export function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\.\d+\.\d+\.\d+$/.test(host);
}
