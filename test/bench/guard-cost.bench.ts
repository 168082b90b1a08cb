import os from 'node:os';
import { createContextValues, type Interceptor, type UnaryRequest, type UnaryResponse } from '@connectrpc/connect';
import { describe, expect, it } from 'vitest';
import { WorkflowService } from '../../src/gen/leoflow/v1/workflow_pb.js';
import { callerKey } from '../../src/server/auth/caller.js';
import type { TokenAuthenticator } from '../../src/server/auth/token-authenticator.js';
import { tokenGuard } from '../../src/server/auth/token-guard.js';
import { TokenStreams } from '../../src/server/auth/token-streams.js';
import { WriteLimiter, writeLimit } from '../../src/server/auth/write-limiter.js';
import { report } from './report.js';

/**
 * guard-cost: what the token guard and the write limiter add to a call in the server's own
 * thread, apart from the token's lookup in Postgres (that is token-auth.bench.ts). A TriggerRun
 * request goes through: nothing (A), the token guard with a lookup answered from memory (B), and
 * the guard then the limiter at a bound it never reaches (C), as the server chains them. Rounds
 * alternate A, B, C, so the machine's drift falls on all alike; the medians of rounds are given.
 */

const ROUNDS = Number(process.env.LEOFLOW_BENCH_GUARD_ROUNDS ?? 9);
const CALLS = 100_000;

const token = { id: 'tok1', role: 'operator', expires_at: null } as never;
const auth: TokenAuthenticator = { authenticate: async () => ({ ok: true, token }), forget: () => {} };
const guard = tokenGuard(auth, () => {}, new TokenStreams({ watch: 64, follow: 64, agent: 256 }));
const limit = writeLimit(new WriteLimiter(1e12), true, () => {});
const method = WorkflowService.method.triggerRun;
const answer = {} as UnaryResponse;
const handler = async () => answer;

function request(): UnaryRequest {
  const contextValues = createContextValues();
  contextValues.set(callerKey, { id: 'unknown', peer: '127.0.0.1:1' });
  return {
    stream: false,
    service: WorkflowService,
    method,
    requestMethod: 'POST',
    url: 'http://127.0.0.1/leoflow.v1.WorkflowService/TriggerRun',
    signal: new AbortController().signal,
    header: new Headers({ authorization: 'Bearer lf_secret' }),
    contextValues,
    message: {},
  } as unknown as UnaryRequest;
}

/** ns a call through `chain`, over CALLS calls (a fresh request each, as the server makes). */
async function nsPerCall(chain: Interceptor[]): Promise<number> {
  type Next = (r: UnaryRequest) => Promise<unknown>;
  const call = chain.reduceRight<Next>((next, i) => i(next as never) as unknown as Next, handler);
  const t = process.hrtime.bigint();
  for (let i = 0; i < CALLS; i++) await call(request());
  return Number(process.hrtime.bigint() - t) / CALLS;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

describe('guard-cost', () => {
  it('measures the token guard and the write limiter per call, in process, alternating', async () => {
    const loadBefore = os.loadavg();
    const variants = { none: [] as Interceptor[], guard: [guard], 'guard+limiter': [guard, limit] };
    for (const chain of Object.values(variants)) await nsPerCall(chain); // warm-up: JIT
    const ns: Record<string, number[]> = { none: [], guard: [], 'guard+limiter': [] };
    for (let r = 0; r < ROUNDS; r++)
      for (const [name, chain] of Object.entries(variants)) ns[name]!.push(await nsPerCall(chain));
    const base = median(ns.none!);
    const rows = Object.entries(ns).map(([name, xs]) => ({
      chain: name,
      ns_per_call_median: Math.round(median(xs)),
      ns_min: Math.round(Math.min(...xs)),
      ns_max: Math.round(Math.max(...xs)),
      added_ns: Math.round(median(xs) - base),
    }));
    await report('guard-cost', rows, {
      loadavgBefore: loadBefore,
      loadavgAfter: os.loadavg(),
      rounds: ROUNDS,
      calls: CALLS,
    });
    expect(rows.every((r) => r.ns_per_call_median > 0)).toBe(true);
  });
});
