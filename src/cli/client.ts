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

/** How a client trusts an https:// control plane, and proves who it is when asked (PEM contents). */
export interface ClientTls {
  /** CA the server's certificate must chain to; null: the system's roots. */
  ca: Buffer | null;
  /** A client certificate and its key, for a server with `--tls-client-auth all`. */
  cert?: Buffer | null;
  key?: Buffer | null;
}

/** Sends `authorization: Bearer <token>` with every call. */
function bearer(token: string): Interceptor {
  return (next) => (req) => {
    req.header.set('authorization', `Bearer ${token}`);
    return next(req);
  };
}

/**
 * gRPC over HTTP/2 to a control plane (any replica: every replica serves the API); TLS for
 * https://, and the API token when one is given (`--token` or LEOFLOW_TOKEN).
 */
export function createClients(baseUrl: string, tls: ClientTls | null = null, token: string | null = null): Clients {
  const secure = baseUrl.startsWith('https:');
  if (tls && !secure && (tls.ca || tls.cert))
    throw new Error(
      `--server: a CA file or client certificate was given but ${baseUrl} is not https://; ` +
        `use https://${baseUrl.replace(/^\w+:\/\//, '')}`,
    );
  const transport = createGrpcTransport({
    baseUrl,
    interceptors: token ? [bearer(token)] : [],
    ...(secure && tls
      ? {
          nodeOptions: {
            ...(tls.ca ? { ca: tls.ca } : {}),
            ...(tls.cert && tls.key ? { cert: tls.cert, key: tls.key } : {}),
          },
        }
      : {}),
  });
  return {
    workflow: createClient(WorkflowService, transport),
    cluster: createClient(ClusterService, transport),
    tokens: createClient(TokenService, transport),
  };
}
