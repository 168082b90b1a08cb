import { createClient, type Client } from '@connectrpc/connect';
import { createGrpcTransport } from '@connectrpc/connect-node';
import { ClusterService } from '../gen/leoflow/v1/cluster_pb.js';
import { WorkflowService } from '../gen/leoflow/v1/workflow_pb.js';

export interface Clients {
  workflow: Client<typeof WorkflowService>;
  cluster: Client<typeof ClusterService>;
}

/** How a client trusts an https:// control plane, and proves who it is when asked (PEM contents). */
export interface ClientTls {
  /** CA the server's certificate must chain to; null: the system's roots. */
  ca: Buffer | null;
  /** A client certificate and its key, for a server with `--tls-client-auth all`. */
  cert?: Buffer | null;
  key?: Buffer | null;
}

/** gRPC over HTTP/2 to a control plane (any replica: every replica serves the API); TLS for https://. */
export function createClients(baseUrl: string, tls: ClientTls | null = null): Clients {
  const secure = baseUrl.startsWith('https:');
  if (tls && !secure && (tls.ca || tls.cert)) throw new Error(`--server: a CA file or client certificate was given but ${baseUrl} is not https://; use https://${baseUrl.replace(/^\w+:\/\//, '')}`);
  const transport = createGrpcTransport({
    baseUrl,
    ...(secure && tls ? { nodeOptions: { ...(tls.ca ? { ca: tls.ca } : {}), ...(tls.cert && tls.key ? { cert: tls.cert, key: tls.key } : {}) } } : {}),
  });
  return { workflow: createClient(WorkflowService, transport), cluster: createClient(ClusterService, transport) };
}
