import { createClient, type Client, type Interceptor } from '@connectrpc/connect';
import { createGrpcTransport } from '@connectrpc/connect-node';
import { ClusterService } from '../gen/leoflow/v1/cluster_pb.js';
import { TokenService } from '../gen/leoflow/v1/token_pb.js';
import { WorkflowService } from '../gen/leoflow/v1/workflow_pb.js';

export interface Clients {
  workflow: Client<typeof WorkflowService>;
  cluster: Client<typeof ClusterService>;
  tokens: Client<typeof TokenService>;
}

/** Sends `authorization: Bearer <token>` with every call. */
function bearer(token: string): Interceptor {
  return (next) => (req) => {
    req.header.set('authorization', `Bearer ${token}`);
    return next(req);
  };
}

/**
 * gRPC over HTTP/2 to a control plane (any replica: every replica serves the API), with the API
 * token when one is given (`--token` or LEOFLOW_TOKEN).
 */
export function createClients(baseUrl: string, token: string | null = null): Clients {
  const transport = createGrpcTransport({ baseUrl, interceptors: token ? [bearer(token)] : [] });
  return { workflow: createClient(WorkflowService, transport), cluster: createClient(ClusterService, transport), tokens: createClient(TokenService, transport) };
}
