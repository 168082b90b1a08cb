import { Code, ConnectError } from '@connectrpc/connect';
import { tokens } from '../api/clients.js';
import { readToken } from './token-store.js';

/** What the dashboard may offer: `open` is a server without tokens (loopback Lite), which allows all. */
export type Access =
  { kind: 'needs-token'; message: string } | { kind: 'ready'; role: 'viewer' | 'operator' | 'admin'; open: boolean };

const ROLES = new Set(['viewer', 'operator', 'admin']);

/** The caller's role, as the server sees the token in session storage (or its absence). */
export async function detectRole(): Promise<Access> {
  try {
    const me = await tokens.whoAmI({});
    if (!ROLES.has(me.role)) {
      return { kind: 'needs-token', message: `A token of role ${me.role} cannot use the dashboard.` };
    }
    return { kind: 'ready', role: me.role as 'viewer' | 'operator' | 'admin', open: !me.tokenRequired };
  } catch (err) {
    const e = ConnectError.from(err);
    // Refused: no token, or one the server does not take (unknown, revoked, expired), or one of
    // role agent. The server's reason names the call that asked; the person asked nothing of it.
    if (e.code !== Code.Unauthenticated && e.code !== Code.PermissionDenied) throw e;
    const reason = e.rawMessage.replace(/^WhoAmI: /, '');
    return { kind: 'needs-token', message: readToken() ? `The server refused that token: ${reason}` : '' };
  }
}
