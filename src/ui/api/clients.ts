/**
 * The dashboard's API clients: connect-web over the page's own origin (the API port serves both),
 * with the messages and services generated from proto/ for the server (src/gen), not a second codegen.
 */
import { createClient, type Interceptor } from '@connectrpc/connect';
import { createConnectTransport } from '@connectrpc/connect-web';
import { ClusterService } from '../../gen/leoflow/v1/cluster_pb.js';
import { TokenService } from '../../gen/leoflow/v1/token_pb.js';
import { WorkflowService } from '../../gen/leoflow/v1/workflow_pb.js';
import { readToken } from '../auth/token-store.js';

/** Sends the token kept for this tab, read at each call so a new one applies at once. */
const bearer: Interceptor = (next) => (req) => {
  const token = readToken();
  if (token) req.header.set('authorization', `Bearer ${token}`);
  return next(req);
};

const transport = createConnectTransport({
  baseUrl: window.location.origin,
  useBinaryFormat: true,
  interceptors: [bearer],
});

export const workflow = createClient(WorkflowService, transport);
export const cluster = createClient(ClusterService, transport);
export const tokens = createClient(TokenService, transport);
