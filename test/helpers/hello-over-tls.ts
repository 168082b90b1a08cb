import { randomUUID } from 'node:crypto';
import { create } from '@bufbuild/protobuf';
import { createAgentServiceClient, type AgentTls } from '../../src/agent/agent-service-client.js';
import { ConnectRequestSchema, ProtocolVersion, type ConnectResponse } from '../../src/gen/leoflow/v1/agent_pb.js';

/**
 * A raw agent stream over TLS that says Hello as `agentId` (a pod's agent: with `only`, its
 * attempt); resolves with the first answer or the refusal, for the TLS and mTLS tests.
 */
export async function helloOverTls(
  url: string,
  agentId: string,
  tls: AgentTls,
  o: { only?: { tiId: string; attemptToken: string }; labels?: Record<string, string> } = {},
): Promise<{ welcome: ConnectResponse | null; err: { code: number; details: string } | null }> {
  const client = createAgentServiceClient({ serverUrl: url, http2KeepaliveMs: 10_000, tls });
  const call = client.connect();
  try {
    return await new Promise((resolve) => {
      const timer = setTimeout(
        () => resolve({ welcome: null, err: { code: -1, details: 'no answer in 15 s' } }),
        15_000,
      );
      call.on('data', (m: ConnectResponse) => (clearTimeout(timer), resolve({ welcome: m, err: null })));
      // connect-node percent-encodes grpc-message more than grpc-js decodes (as control-plane-session.ts says).
      call.on(
        'error',
        (e: { code: number; details: string }) => (
          clearTimeout(timer),
          resolve({ welcome: null, err: { code: e.code, details: decodeURIComponent(e.details) } })
        ),
      );
      call.write(
        create(ConnectRequestSchema, {
          msg: {
            case: 'hello',
            value: {
              protocolVersion: ProtocolVersion.PROTOCOL_VERSION_2,
              agentId,
              slots: 1,
              incarnationId: randomUUID(),
              labels: o.labels ?? {},
              onlyTiId: o.only?.tiId ?? '',
              onlyAttemptToken: o.only?.attemptToken ?? '',
            },
          },
        }),
      );
    });
  } finally {
    call.cancel();
    client.close();
  }
}
