import { Code, ConnectError } from '@connectrpc/connect';
import { cluster, tokens } from '../api/clients.js';
import { readToken } from './token-store.js';

/**
 * What the dashboard may offer: `open` is a server without tokens (loopback Lite), which allows all;
 * `readOnly` says why the replica serving the page refuses every write (role observer), else null.
 */
export type Access =
  | { kind: 'needs-token'; message: string }
  | { kind: 'ready'; role: 'viewer' | 'operator' | 'admin'; open: boolean; readOnly: string | null };

const ROLES = new Set(['viewer', 'operator', 'admin']);

/** The caller's role, as the server sees the token in session storage (or its absence), and the replica's. */
export async function detectRole(): Promise<Access> {
  // Asked together: the replica's role (GetLeader) costs no second round trip. Its failure only
  // leaves the buttons to the server's refusal.
  const replica = cluster.getLeader({}).then(
    (r) => r.role,
    () => '',
  );
  try {
    const me = await tokens.whoAmI({});
    if (!ROLES.has(me.role)) {
      return { kind: 'needs-token', message: `A token of role ${me.role} cannot use the dashboard.` };
    }
    const readOnly =
      (await replica) === 'observer'
        ? 'This replica is an observer (read-only): it refuses every change. Use one with role auto, leader or worker.'
        : null;
    return { kind: 'ready', role: me.role as 'viewer' | 'operator' | 'admin', open: !me.tokenRequired, readOnly };
  } catch (err) {
    const e = ConnectError.from(err);
    // Refused: no token, or one the server does not take (unknown, revoked, expired), or one of
    // role agent. The server's reason names the call that asked; the person asked nothing of it.
    if (e.code !== Code.Unauthenticated && e.code !== Code.PermissionDenied) throw e;
    const reason = e.rawMessage.replace(/^WhoAmI: /, '');
    return { kind: 'needs-token', message: readToken() ? `The server refused that token: ${reason}` : '' };
  }
}
