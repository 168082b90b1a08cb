import os from 'node:os';
import type { Command } from 'commander';
import { AgentConfigError, parseAgentFlags, type AgentConfig, type AgentFlags } from '../../agent/agent-config.js';
import type { AgentTls } from '../../agent/agent-service-client.js';
import { readCertificateAndKey, readCertificateFile } from '../../core/pem-files.js';

/** The certificate's CN, or undefined when it cannot be read (readAgentTls then says why). */
function commonNameOf(file: string): string | undefined {
  try {
    return cnOf(readCertificateFile(file).certs[0]!.subject);
  } catch {
    return undefined;
  }
}

function cnOf(subject: string): string | undefined {
  return /^CN=(.*)$/m.exec(subject)?.[1];
}

/** The agent's CA and client certificate files read and checked now, not at the first connection. */
function readAgentTls(c: AgentConfig): AgentTls | null {
  if (c.caFile === null && c.tlsCertFile === null) return null;
  const problems: string[] = [];
  let ca: Buffer | null = null;
  let pair: { cert: Buffer; key: Buffer } | null = null;
  if (c.caFile !== null) {
    try {
      ca = readCertificateFile(c.caFile).pem;
    } catch (err) {
      problems.push(`--ca-file: ${(err as Error).message}`);
    }
  }
  if (c.tlsCertFile !== null && c.tlsKeyFile !== null) {
    try {
      const p = readCertificateAndKey(c.tlsCertFile, c.tlsKeyFile);
      const cn = cnOf(p.leaf.subject);
      if (cn !== c.agentId)
        problems.push(
          `--tls-cert: the certificate is for agent ${JSON.stringify(cn ?? '(no CN)')} (its CN), ` +
            `but this agent's --id is ${JSON.stringify(c.agentId)}; the control plane would refuse it`,
        );
      pair = p;
    } catch (err) {
      problems.push(`--tls-cert/--tls-key: ${(err as Error).message}`);
    }
  }
  if (problems.length > 0) throw new AgentConfigError(problems);
  return { ca, cert: pair?.cert ?? null, key: pair?.key ?? null };
}

const AFTER_HELP = `
--server takes several control-plane replicas (repeat it, or separate addresses with commas):
  leoflow agent --server http://cp-a:7070 --server http://cp-b:7070
Each reconnect goes to the next address in turn. A replica that shuts down gracefully tells its
agents to reconnect elsewhere at once; they keep their running tasks.

On SIGTERM or Ctrl-C (a second signal SIGKILLs the tasks and exits at once, code 130):
  --on-shutdown finish    (default) take no new work; let running tasks end and report them, and
                          exit once the control plane acknowledged them, waiting up to
                          --shutdown-grace. Tasks still running then are handled as by handback.
  --on-shutdown handback  stop running tasks now (SIGTERM, SIGKILL after the kill grace) and report
                          them failed ("agent … shut down before the task ended"), so the control
                          plane retries them, on any agent, under their retry policy: the try counts.
                          An Assign that still arrives is reported failed, not run.
Either way no task is lost: a report the agent cannot deliver before it exits (the control plane
is unreachable) leaves the task to the control plane's heartbeat reaper, which retries it once its
heartbeat threshold has passed; a task that ended but was not acknowledged may then run again.

--once --ti ID: a one-shot agent (the Kubernetes executor's pod entry point): it takes only the
current attempt of task instance ID (exactly the attempt whose token LEOFLOW_ATTEMPT_TOKEN names,
when set: a pod gets only the attempt it was created for) and exits 0 once its end is acknowledged, whatever the task's
outcome (the outcome is in the control plane), or once drained with nothing to run.

Exit codes: 0 stopped or done, 1 refused by the control plane (e.g. an unknown protocol version or
a wrong token: not retried), 2 invalid flags, 130 killed by a second signal.`;

export function registerAgent(program: Command): void {
  program
    .command('agent')
    .description('run an agent: connect to the control plane (--server, one or more) and run the tasks it assigns')
    .option(
      '--id <name>',
      "agent id, unique in the fleet: letters, digits, _ . - : (default: --tls-cert's CN, else hostname-pid)",
    )
    .option('--labels <k=v,...>', 'placement labels, e.g. gpu=nvidia,zone=a')
    .option('--capabilities <a,b,...>', 'placement capabilities, e.g. docker,python3')
    .option('--slots <n>', 'tasks run at once (default 1)')
    .option(
      '--token <token>',
      'agent credential: a token of role agent bound to this id (leoflow token create --role agent), ' +
        'or the deprecated shared secret [env LEOFLOW_AGENT_TOKEN]',
    )
    .option(
      '--tls-cert <file>',
      'PEM client certificate whose CN is this agent id, ' +
        'for a control plane with --tls-client-ca (with --tls-key) [env LEOFLOW_AGENT_TLS_CERT]',
    )
    .option('--tls-key <file>', 'PEM private key of --tls-cert [env LEOFLOW_AGENT_TLS_KEY]')
    .option('--once', 'one-shot: run the current attempt of --ti, then exit')
    .option('--ti <id>', 'the task instance of a one-shot agent (with --once)')
    .option('--on-shutdown <mode>', 'finish | handback: what SIGTERM does to running tasks (default finish)')
    .option('--shutdown-grace <duration>', 'how long a graceful stop waits, e.g. 30s (default 30s)')
    .option(
      '--kill-grace <duration>',
      'time between SIGTERM and SIGKILL when stopping a task (default 10s); ' +
        "the control plane's own --kill-grace, sent with each task, overrides it (an older control plane sends none)",
    )
    .option(
      '--state-dir <dir>',
      "where the agent's tasks keep their output and exit status, " +
        'so a restart with the same --id re-attaches to them (default .leoflow/agents/<id>)',
    )
    .option('--log-format <format>', 'json | pretty (default: pretty at a terminal, json otherwise)')
    .option('--log-level <level>', 'trace | debug | info | warn | error | fatal | silent (default info)')
    .addHelpText('after', AFTER_HELP)
    .action(async (flags: AgentFlags, cmd: Command) => {
      // `leoflow --token` (the API token) is parsed by the program wherever it stands, so the
      // agent's own --token reaches it as a global.
      const { server, caFile, token } = cmd.optsWithGlobals<{ server: string; caFile?: string; token?: string }>();
      let config;
      let tls;
      try {
        // With a client certificate and no --id, the agent is who its certificate says.
        const certFile = flags.tlsCert || process.env.LEOFLOW_AGENT_TLS_CERT;
        const id = flags.id ?? (certFile ? commonNameOf(certFile) : undefined);
        config = parseAgentFlags(
          {
            ...flags,
            server,
            token: flags.token ?? token,
            ...(caFile ? { caFile } : {}),
            ...(id !== undefined ? { id } : {}),
          },
          {
            hostname: os.hostname(),
            pid: process.pid,
            isTTY: process.stdout.isTTY === true,
            token: process.env.LEOFLOW_AGENT_TOKEN,
            attemptToken: process.env.LEOFLOW_ATTEMPT_TOKEN,
            tlsCert: process.env.LEOFLOW_AGENT_TLS_CERT,
            tlsKey: process.env.LEOFLOW_AGENT_TLS_KEY,
          },
        );
        tls = readAgentTls(config);
      } catch (err) {
        if (!(err instanceof AgentConfigError)) throw err;
        for (const p of err.problems) process.stderr.write(`leoflow agent: ${p}\n`);
        process.exit(2);
      }
      // Loaded here, not at the top: the client commands should not pay for grpc-js and pino.
      const { createLogger } = await import('../../core/logger.js');
      const { AgentFatalError, runAgent } = await import('../../agent/index.js');
      const logger = createLogger({ level: config.logLevel, format: config.logFormat }).child({
        agentId: config.agentId,
      });
      const agent = runAgent({ ...config, tls, logger });

      let signals = 0;
      const onSignal = (signal: NodeJS.Signals) => {
        signals++;
        if (signals > 1) {
          logger.warn({ signal }, 'second signal: killing the tasks and exiting now');
          agent.kill();
          process.exit(130);
        }
        logger.info({ signal, onShutdown: config.onShutdown }, 'received signal: stopping gracefully');
        // How it ends (or fails) is reported below, through agent.done.
        agent.stop(config.onShutdown).catch(() => {});
      };
      process.on('SIGTERM', onSignal);
      process.on('SIGINT', onSignal);

      try {
        await agent.done;
        process.exit(0);
      } catch (err) {
        if (err instanceof AgentFatalError) {
          process.stderr.write(`leoflow agent: ${err.message}\n`);
          process.exit(1);
        }
        throw err;
      }
    });
}
