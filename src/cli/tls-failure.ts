/**
 * A failed TLS handshake in words a user can act on. connect-node reports these as INTERNAL with
 * OpenSSL's text ("unable to verify the first certificate"); the code on the cause says which
 * side refused and why.
 */
const SERVER_NOT_TRUSTED = new Set([
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'CERT_SIGNATURE_FAILURE',
]);

export function tlsFailure(err: unknown, server: string): string | null {
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    const code = (e as NodeJS.ErrnoException).code;
    if (typeof code !== 'string') continue;
    if (SERVER_NOT_TRUSTED.has(code))
      return (
        `cannot verify the control plane's TLS certificate at ${server} (${e.message}): ` +
        `give the CA that signed it with --ca-file or LEOFLOW_CA_FILE`
      );
    if (code === 'CERT_HAS_EXPIRED' || code === 'CERT_NOT_YET_VALID')
      return `the control plane's TLS certificate at ${server} is out of date (${e.message})`;
    if (code === 'ERR_TLS_CERT_ALTNAME_INVALID')
      return `the control plane's TLS certificate does not name the host of ${server} (${e.message})`;
    if (/ALERT_CERTIFICATE_REQUIRED|ALERT_BAD_CERTIFICATE|ALERT_UNKNOWN_CA|ALERT_CERTIFICATE_UNKNOWN/.test(code)) {
      return (
        `the control plane at ${server} refused the TLS handshake: ` +
        `it requires a client certificate signed by its --tls-client-ca; ` +
        `give one with --client-cert and --client-key (${code})`
      );
    }
    if (code === 'ERR_SSL_WRONG_VERSION_NUMBER' || code === 'ERR_SSL_PACKET_LENGTH_TOO_LONG')
      return `the server at ${server} does not speak TLS: use --server ${server.replace(/^https:/, 'http:')} (${code})`;
  }
  return null;
}
