import { describe, expect, it } from 'vitest';
import {
  AgentConfigError,
  defaultAgentId,
  MAX_SERVERS,
  parseAgentFlags,
  parseCapabilities,
  parseLabels,
  type AgentFlags,
} from '../../src/agent/agent-config.js';

const env = { hostname: 'worker-1.example', pid: 4242, isTTY: false };

function problems(flags: AgentFlags): string[] {
  try {
    parseAgentFlags(flags, env);
  } catch (err) {
    if (err instanceof AgentConfigError) return err.problems;
    throw err;
  }
  throw new Error('expected AgentConfigError');
}

describe('leoflow agent flags', () => {
  it('defaults', () => {
    expect(parseAgentFlags({}, env)).toEqual({
      serverUrls: ['http://127.0.0.1:7070'],
      agentId: 'worker-1.example-4242',
      labels: {},
      capabilities: [],
      slots: 1,
      token: '',
      onlyTiId: null,
      onlyAttemptToken: null,
      onShutdown: 'finish',
      shutdownGraceMs: 30_000,
      killGraceMs: 10_000,
      stateDir: '.leoflow/agents/worker-1.example-4242',
      logFormat: 'json',
      logLevel: 'info',
      caFile: null,
      tlsCertFile: null,
      tlsKeyFile: null,
    });
    expect(parseAgentFlags({}, { ...env, isTTY: true }).logFormat).toBe('pretty');
  });

  it('parses every flag', () => {
    const c = parseAgentFlags(
      {
        server: 'https://cp.example:443',
        id: 'gpu-box:1',
        labels: 'gpu=nvidia, zone=a,empty=',
        capabilities: 'docker,python3,docker',
        slots: '4',
        once: true,
        ti: '9007199254740993',
        onShutdown: 'handback',
        shutdownGrace: '1m',
        killGrace: '500ms',
        logFormat: 'pretty',
        logLevel: 'debug',
      },
      { ...env, token: 'from-env' },
    );
    expect(c).toMatchObject({
      serverUrls: ['https://cp.example:443'],
      agentId: 'gpu-box:1',
      labels: { gpu: 'nvidia', zone: 'a', empty: '' },
      capabilities: ['docker', 'python3'],
      slots: 4,
      token: 'from-env',
      onlyTiId: '9007199254740993',
      onShutdown: 'handback',
      shutdownGraceMs: 60_000,
      killGraceMs: 500,
      logFormat: 'pretty',
      logLevel: 'debug',
    });
    expect(parseAgentFlags({ token: 'flag' }, { ...env, token: 'env' }).token).toBe('flag');
  });

  it('reports every problem at once, each naming its flag', () => {
    expect(
      problems({
        server: 'ftp://x',
        id: 'has space',
        labels: 'gpu',
        capabilities: 'a,,b',
        slots: '0',
        once: true,
        onShutdown: 'later',
        shutdownGrace: 'soon',
        killGrace: '-1s',
        logFormat: 'xml',
        logLevel: 'loud',
      }),
    ).toEqual([
      '--server: expected an http:// or https:// URL, got "ftp://x"',
      `--id: must be letters, digits, '_', '.', '-' or ':', got "has space"`,
      '--labels: expected k=v pairs separated by commas, got "gpu"',
      '--capabilities: expected names separated by commas, got "a,,b"',
      '--slots: must be a positive integer, got "0"',
      '--once: requires --ti ID (the task instance to run)',
      '--on-shutdown: must be one of finish, handback, got "later"',
      '--shutdown-grace: expected a duration like "30s", "5m" or "1h30m", got "soon"',
      '--kill-grace: expected a duration like "30s", "5m" or "1h30m", got "-1s"',
      '--log-format: must be one of json, pretty, got "xml"',
      '--log-level: must be one of trace, debug, info, warn, error, fatal, silent, got "loud"',
    ]);
  });

  it('--server takes several addresses (repeated, joined with commas), each checked and named when bad', () => {
    expect(parseAgentFlags({ server: 'http://a:7070,https://b:7443' }, env).serverUrls).toEqual([
      'http://a:7070',
      'https://b:7443',
    ]);
    expect(parseAgentFlags({ server: ' http://a:7070 , http://b:7070 ' }, env).serverUrls).toEqual([
      'http://a:7070',
      'http://b:7070',
    ]);
    expect(problems({ server: 'http://a:7070,b:7070' })).toEqual([
      '--server: address 2 of 2: expected an http:// or https:// URL, got "b:7070"',
    ]);
    expect(problems({ server: 'http://a:7070,,http://b:7070' })).toEqual([
      '--server: address 2 of 3: empty address in "http://a:7070,,http://b:7070"',
    ]);
    expect(problems({ server: 'http://a:7070,http://a:7070' })).toEqual([
      '--server: address 2 of 2: "http://a:7070" given twice',
    ]);
    const many = Array.from({ length: MAX_SERVERS + 1 }, (_, i) => `http://cp${i}:7070`).join(',');
    expect(problems({ server: many })).toEqual([`--server: at most ${MAX_SERVERS} addresses, got ${MAX_SERVERS + 1}`]);
    expect(parseAgentFlags({ server: many.split(',').slice(0, MAX_SERVERS).join(',') }, env).serverUrls).toHaveLength(
      MAX_SERVERS,
    );
  });

  it('checks --slots, --ti and --once together', () => {
    for (const slots of ['1.5', '-2', 'two', '', '2147483648']) {
      expect(problems({ slots })).toEqual([`--slots: must be a positive integer, got ${JSON.stringify(slots)}`]);
    }
    expect(problems({ ti: '5' })).toEqual(['--ti: only with --once']);
    expect(problems({ once: true, ti: '0' })).toEqual([
      '--ti: must be a task instance id (a positive integer), got "0"',
    ]);
    expect(problems({ once: true, ti: '9223372036854775808' })).toEqual([
      '--ti: must be a task instance id (a positive integer), got "9223372036854775808"',
    ]);
    expect(parseAgentFlags({ once: true, ti: '9223372036854775807' }, env).onlyTiId).toBe('9223372036854775807');
  });

  it('takes the attempt token of a pod from LEOFLOW_ATTEMPT_TOKEN, only with --once --ti', () => {
    const token = '0b5f3c0e-8d6a-4d43-9c43-2f1d1f4e9a10';
    expect(parseAgentFlags({ once: true, ti: '7' }, { ...env, attemptToken: token }).onlyAttemptToken).toBe(token);
    expect(parseAgentFlags({ once: true, ti: '7' }, { ...env, attemptToken: '' }).onlyAttemptToken).toBeNull();
    const bad = (flags: AgentFlags, attemptToken: string) => {
      try {
        parseAgentFlags(flags, { ...env, attemptToken });
      } catch (err) {
        return (err as AgentConfigError).problems;
      }
      return [];
    };
    expect(bad({}, token)).toEqual(['LEOFLOW_ATTEMPT_TOKEN: only with --once --ti ID']);
    expect(bad({ once: true, ti: '7' }, 'x')).toEqual([
      'LEOFLOW_ATTEMPT_TOKEN: must be an attempt token (a UUID), got "x"',
    ]);
  });

  it('labels and capabilities', () => {
    expect(parseLabels('')).toEqual({});
    expect(parseLabels('a=1,b=x=y')).toEqual({ a: '1', b: 'x=y' });
    expect(() => parseLabels('a=1,gpu')).toThrow('expected k=v pairs separated by commas, got "gpu"');
    expect(() => parseLabels('=v')).toThrow('expected k=v pairs separated by commas, got "=v"');
    expect(() => parseLabels('a=1,a=2')).toThrow('label "a" given twice');
    expect(parseCapabilities(' docker , gpu ')).toEqual(['docker', 'gpu']);
    expect(() => parseCapabilities('a=b')).toThrow('expected names separated by commas, got "a=b"');
    expect(() => parseCapabilities('docker,leoflow.secret-env')).toThrow(
      '"leoflow.secret-env": names starting with "leoflow." are the protocol features the agent announces itself',
    );
  });

  it('default id is hostname-pid, made valid', () => {
    expect(defaultAgentId('my host/x', 7)).toBe('my-host-x-7');
    expect(defaultAgentId('', 7)).toBe('agent-7');
  });
});
