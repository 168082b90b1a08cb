import { createHash } from 'node:crypto';
import http from 'node:http';
import https from 'node:https';
import { KubeConfig, type RequestContext } from '@kubernetes/client-node';

/**
 * A KubeConfig whose API calls share keep-alive connections. client-node 1.x makes a new agent for
 * every request, so each create, delete and list opened its own TCP (and TLS) connection: about one
 * per pod created. Here each request still gets client-node's own options (its CA, client
 * certificate, server name, read again as client-node reads them), and the agent of those exact
 * options is kept and reused, with keep-alive on. Proxy agents are left as client-node makes them.
 * Watches are long requests with a connection each, as before.
 */
export class KeepAliveKubeConfig extends KubeConfig {
  /** At most a few: options change only when a rotated certificate is read. */
  readonly #agents = new Map<string, http.Agent>();

  override async applySecurityAuthentication(context: RequestContext): Promise<void> {
    await super.applySecurityAuthentication(context);
    const made = context.getAgent();
    if (!made || (made.constructor !== http.Agent && made.constructor !== https.Agent)) return;
    const tls = made instanceof https.Agent;
    // Node keeps an agent's options on it (typed only on https.Agent).
    const o = (made as unknown as { options: https.AgentOptions }).options;
    const key = createHash('sha256')
      .update(JSON.stringify([tls, o.rejectUnauthorized, o.servername, ...[o.ca, o.cert, o.key, o.pfx].map(text)]))
      .update(String(o.passphrase ?? ''))
      .digest('hex');
    let agent = this.#agents.get(key);
    if (!agent) {
      if (this.#agents.size >= 4) this.#agents.delete(this.#agents.keys().next().value!);
      agent = tls ? new https.Agent({ ...o, keepAlive: true }) : new http.Agent({ ...o, keepAlive: true });
      this.#agents.set(key, agent);
    }
    made.destroy();
    context.setAgent(agent);
  }
}

function text(v: unknown): string {
  if (v === undefined || v === null) return '';
  if (Buffer.isBuffer(v)) return v.toString('base64');
  if (Array.isArray(v)) return v.map(text).join(',');
  return String(v);
}
