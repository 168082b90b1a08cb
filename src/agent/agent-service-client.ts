/**
 * The agent's gRPC client for AgentService.Connect: @grpc/grpc-js (the reference implementation,
 * so the agent proves interop with any gRPC server) with protobuf-es doing the (de)serializing.
 */

import { fromBinary, toBinary } from '@bufbuild/protobuf';
import * as grpc from '@grpc/grpc-js';
import {
  ConnectRequestSchema,
  ConnectResponseSchema,
  type ConnectRequest,
  type ConnectResponse,
} from '../gen/leoflow/v1/agent_pb.js';

export const CONNECT_METHOD = '/leoflow.v1.AgentService/Connect';

export type ConnectCall = grpc.ClientDuplexStream<ConnectRequest, ConnectResponse>;

export interface AgentServiceClient {
  /** Opens one Connect stream. */
  connect(): ConnectCall;
  /** Closes the channel (and its connection). */
  close(): void;
}

export interface AgentServiceClientOptions {
  /** http://host:port (plaintext HTTP/2) or https://host:port (TLS, verified with `tls.ca` or the system's roots). */
  serverUrl: string;
  /**
   * HTTP/2 PING interval. It keeps NATs and proxies from dropping an idle connection and finds a
   * dead one; it cannot find a deaf stream, which is what the app-level Keepalive is for.
   */
  http2KeepaliveMs: number;
  /** PEM contents: the CA to verify the server with (null: the system's roots), the client certificate (mTLS). */
  tls?: AgentTls | null;
}

export interface AgentTls {
  ca: Buffer | null;
  cert: Buffer | null;
  key: Buffer | null;
}

/**
 * A fresh channel per stream: after a deaf or broken stream the agent wants a new connection,
 * not the old one reused by the channel.
 */
export function createAgentServiceClient(opts: AgentServiceClientOptions): AgentServiceClient {
  const url = new URL(opts.serverUrl);
  const tls = url.protocol === 'https:';
  const port = url.port || (tls ? '443' : '80');
  const client = new grpc.Client(
    `${url.hostname}:${port}`,
    tls
      ? grpc.credentials.createSsl(opts.tls?.ca ?? null, opts.tls?.key ?? null, opts.tls?.cert ?? null)
      : grpc.credentials.createInsecure(),
    {
      'grpc.keepalive_time_ms': opts.http2KeepaliveMs,
      'grpc.keepalive_timeout_ms': Math.min(20_000, Math.max(1_000, opts.http2KeepaliveMs)),
      'grpc.keepalive_permit_without_calls': 1,
    },
  );
  return {
    connect: () => client.makeBidiStreamRequest(CONNECT_METHOD, serialize, deserialize),
    close: () => client.close(),
  };
}

function serialize(msg: ConnectRequest): Buffer {
  const bytes = toBinary(ConnectRequestSchema, msg);
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

function deserialize(buf: Buffer): ConnectResponse {
  return fromBinary(ConnectResponseSchema, buf);
}
