/** Now as the API server writes times: RFC 3339 in UTC, to the second (metav1.Time). */
export function now(): string {
  return new Date().toISOString().replace(/\.\d+Z$/, 'Z');
}
