import type http from 'node:http';
import type http2 from 'node:http2';
import { TLSSocket } from 'node:tls';
import { Code, ConnectError, createContextKey } from '@connectrpc/connect';

/**
 * An agent's identity from its TLS client certificate (mTLS): the certificate's subject CN is the
 * agent id it may say Hello as. CN rather than a DNS SAN because agent ids may hold ':' (and
 * `host-pid` ids are not host names), which a DNS name cannot.
 */
export interface ClientCertificate {
  /** Signed by the server's --tls-client-ca (and in date). */
  verified: boolean;
  /** Why it is not verified (OpenSSL's reason, e.g. UNABLE_TO_VERIFY_LEAF_SIGNATURE). */
  error: string | null;
  /** The subject's CN; null when it has none. */
  commonName: string | null;
}

/**
 * The request's client certificate: undefined when the server asks for none (no --tls-client-ca),
 * null when it asks and the client presented none.
 */
export const clientCertificateKey = createContextKey<ClientCertificate | null | undefined>(undefined, {
  description: 'TLS client certificate',
});

/** The certificate the client presented on the request's connection (HTTP/2 or HTTP/1.1). */
export function clientCertificateOf(req: http.IncomingMessage | http2.Http2ServerRequest): ClientCertificate | null {
  const socket = 'stream' in req ? req.stream.session?.socket : req.socket;
  if (!(socket instanceof TLSSocket)) return null;
  const peer = socket.getPeerCertificate();
  if (!peer || Object.keys(peer).length === 0) return null;
  const cn = peer.subject?.CN;
  return {
    verified: socket.authorized,
    error: socket.authorized ? null : String(socket.authorizationError ?? 'not verified'),
    commonName: typeof cn === 'string' ? cn : Array.isArray(cn) ? (cn[0] ?? null) : null,
  };
}

/**
 * The rule at Hello: with mTLS on, an agent stream needs a verified client certificate whose CN
 * is the agent id it says Hello as. Nothing is checked when the server asks for no certificate.
 */
export function checkAgentCertificate(cert: ClientCertificate | null | undefined, agentId: string): void {
  if (cert === undefined) return;
  if (cert === null)
    throw new ConnectError(
      `agent ${JSON.stringify(agentId)} presented no TLS client certificate; ` +
        `this control plane requires one signed by its --tls-client-ca for agent streams`,
      Code.Unauthenticated,
    );
  if (!cert.verified)
    throw new ConnectError(
      `agent ${JSON.stringify(agentId)}: its TLS client certificate (CN=${cert.commonName ?? 'none'}) ` +
        `is not signed by this control plane's --tls-client-ca (${cert.error})`,
      Code.Unauthenticated,
    );
  if (cert.commonName !== agentId) {
    throw new ConnectError(
      `hello.agent_id: the TLS client certificate is agent ${JSON.stringify(cert.commonName ?? '(no CN)')}'s, ` +
        `but Hello says agent ${JSON.stringify(agentId)}`,
      Code.PermissionDenied,
    );
  }
}
