// The first message of an agent stream: read within a bound, and checked before anything about
// the agent is written (protocol version, client certificate, fields, credential). Its own file:
// what lets an agent in is read apart from what the stream then does.
import { Code, ConnectError } from '@connectrpc/connect';
import { ProtocolVersion, type ConnectRequest, type Hello } from '../../gen/leoflow/v1/agent_pb.js';
import { checkAgentCredential, type AgentCredentials, type AgentTokenUsed } from '../auth/agent-credential.js';
import type { HeldRef } from './heartbeat-buffer.js';
import { checkAgentCertificate, type ClientCertificate } from '../auth/tls-identity.js';
import { validateHelloFields } from './validate-agent-message.js';

export const SUPPORTED_PROTOCOL_VERSIONS = [ProtocolVersion.PROTOCOL_VERSION_1];

const HELLO_TIMEOUT_MS = 10_000;

/** The version: a refusal a retry cannot fix, with a code of its own. */
function checkHelloAccess(h: Hello): void {
  if (!SUPPORTED_PROTOCOL_VERSIONS.includes(h.protocolVersion)) {
    throw new ConnectError(
      `agent speaks protocol version ${h.protocolVersion}; ` +
        `this control plane speaks ${SUPPORTED_PROTOCOL_VERSIONS.join(', ')}`,
      Code.FailedPrecondition,
    );
  }
  // Required since 2026-11 within protocol version 1: an agent from before it is told, as for a
  // version it does not speak, to upgrade (FAILED_PRECONDITION stops it), not that it erred.
  if (h.incarnationId === '') {
    throw new ConnectError(
      'hello.incarnation_id: this control plane needs it (a UUID made once per agent process); ' +
        'this agent is older than the control plane: upgrade it',
      Code.FailedPrecondition,
    );
  }
}

/**
 * Reads the stream's Hello and lets the agent in or throws the refusal; `valid` checks its fields
 * (counting and logging a refusal as the stream does). Returns the Hello and the attempts it holds.
 */
export async function readHello(
  it: AsyncIterator<ConnectRequest>,
  clientCert: ClientCertificate | null | undefined,
  credentials: AgentCredentials,
  valid: (check: () => HeldRef[]) => HeldRef[],
): Promise<{ hello: Hello; held: HeldRef[]; token: AgentTokenUsed | null }> {
  const first = await Promise.race([
    it.next(),
    new Promise<never>((_, reject) =>
      setTimeout(
        () => reject(new ConnectError(`no Hello within ${HELLO_TIMEOUT_MS} ms`, Code.DeadlineExceeded)),
        HELLO_TIMEOUT_MS,
      ).unref(),
    ),
  ]);
  if (first.done || first.value.msg.case !== 'hello') {
    throw new ConnectError('the first message on the stream must be Hello', Code.InvalidArgument);
  }
  const hello = first.value.msg.value;
  checkHelloAccess(hello);
  // Under mTLS a pod's one-shot agent has no certificate of its pod's name: it may come without
  // one, and then only its attempt's token, for that pod's id, lets it in (agent-credential.ts).
  const podWithoutCertificate = clientCert === null && hello.onlyAttemptToken !== '';
  if (!podWithoutCertificate) checkAgentCertificate(clientCert, hello.agentId);
  const held = valid(() => validateHelloFields(hello));
  const token = await checkAgentCredential(hello, credentials, {
    certified: clientCert != null,
    podWithoutCertificate,
  });
  return { hello, held, token };
}
