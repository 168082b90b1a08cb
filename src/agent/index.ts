/**
 * The agent runtime: the client side of AgentService.Connect. Imports gen, core and the
 * subprocess executor only (never db, scheduler or server).
 *
 * Internal modules (not exported here): control-plane-session (one stream), attempt-runner (the
 * executor and the reports), held-attempts, outbox, log-batcher, attempt-messages,
 * agent-service-client, incarnation (this process's id in every Hello).
 */

export { runAgent, type AgentExit, type RunningAgent as AgentHandle, type RunAgentOptions } from './agent-runtime.js';
export { AgentFatalError } from './agent-fatal-error.js';
export {
  AgentConfigError,
  defaultAgentId,
  parseAgentFlags,
  parseCapabilities,
  parseLabels,
  SHUTDOWN_MODES,
  type AgentConfig,
  type AgentEnvironment,
  type AgentFlags,
  type ShutdownMode,
} from './agent-config.js';
export { Backoff, type BackoffOptions } from './backoff.js';
