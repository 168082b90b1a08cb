import { createClient, type Client } from '@connectrpc/connect';
import { createGrpcTransport } from '@connectrpc/connect-node';
import { ClusterService } from '../gen/leoflow/v1/cluster_pb.js';
import { WorkflowService } from '../gen/leoflow/v1/workflow_pb.js';

export interface Clients {
  workflow: Client<typeof WorkflowService>;
  cluster: Client<typeof ClusterService>;
}

/** gRPC over HTTP/2 to a control plane (any replica: every replica serves the API). */
export function createClients(baseUrl: string): Clients {
  const transport = createGrpcTransport({ baseUrl });
  return { workflow: createClient(WorkflowService, transport), cluster: createClient(ClusterService, transport) };
}
