import { Code, ConnectError } from '@connectrpc/connect';
import { tokens, workflow } from '../api/clients.js';
import { readToken } from './token-store.js';

/** What the dashboard may offer: `open` is a server without tokens (loopback Lite), which allows all. */
export type Access =
  { kind: 'needs-token'; message: string } | { kind: 'ready'; role: 'viewer' | 'operator' | 'admin'; open: boolean };

/**
 * The caller's role, asked of the server's own guard (the API has no "who am I" call): ListTokens
 * answers admins only; PauseDag with no DAG id is refused by role before its input is read, so a
 * viewer gets PERMISSION_DENIED and an operator INVALID_ARGUMENT, and nothing is written.
 */
export async function detectRole(): Promise<Access> {
  try {
    await tokens.listTokens({});
    const open = !(await needsToken());
    return { kind: 'ready', role: 'admin', open };
  } catch (err) {
    const e = ConnectError.from(err);
    if (e.code === Code.Unauthenticated) {
      // The server's reason names the call that asked (ListTokens); the person asked nothing of it.
      const reason = e.rawMessage.replace(/^ListTokens: /, '');
      return { kind: 'needs-token', message: readToken() ? `The server refused that token: ${reason}` : '' };
    }
    if (e.code !== Code.PermissionDenied) throw e;
  }
  try {
    await workflow.pauseDag({ dagId: '', paused: true });
  } catch (err) {
    const e = ConnectError.from(err);
    if (e.code === Code.PermissionDenied) return { kind: 'ready', role: 'viewer', open: false };
  }
  return { kind: 'ready', role: 'operator', open: false };
}

/** Whether the server refuses a call that carries no token. */
async function needsToken(): Promise<boolean> {
  const res = await fetch('/leoflow.v1.WorkflowService/ListDags', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: '{}',
  });
  return res.status === 401;
}
