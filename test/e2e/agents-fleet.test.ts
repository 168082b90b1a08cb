import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { cli, waitFor } from '../helpers/leoflow-process.js';
import { killGroupOf } from '../helpers/process-group.js';
import { isRunEnded } from '../helpers/run-ends.js';
import { metricSum, scrapeMetrics } from '../helpers/scrape-metrics.js';
import { agentsOfEachTest, serverForFile } from '../helpers/server-fixture.js';
import { startTcpProxy } from '../helpers/tcp-proxy.js';
import { processEnds } from '../helpers/process-gone.js';

/**
 * A fleet of real `leoflow agent` processes against the real server: placement, slots and
 * max-parallel (asserted from the events log), drain, an agent SIGKILLed, a network blip, and a
 * frozen (zombie) agent.
 */

const f = serverForFile({
  tmpPrefix: 'leoflow-fleet-',
  args: [
    '--heartbeat-interval',
    '300ms',
    '--heartbeat-threshold',
    '2s',
    '--tick-interval',
    '200ms',
    '--dispatch-workers',
    '4',
    '--dispatch-queue',
    '64',
  ],
});
const agents = agentsOfEachTest(f);
const agent = (id: string, args: string[], url?: string) => agents.connect(id, args, url);

async function apply(name: string, yaml: string): Promise<void> {
  const file = path.join(f.tmp, `${name}.yaml`);
  await writeFile(file, yaml);
  const r = await cli(f.server.url, ['dag', 'apply', file]);
  expect(r.code, r.stderr).toBe(0);
}

async function waitRuns(runIds: string[], timeoutMs = 40_000): Promise<string[]> {
  await waitFor(
    'runs ended',
    async () => {
      const rows = await f.db.sql<{ state: string }[]>`select state from dag_runs where id = any(${runIds}::bigint[])`;
      return rows.every((r) => isRunEnded(r.state));
    },
    timeoutMs,
  );
  const rows = await f.db.sql<
    { state: string }[]
  >`select state from dag_runs where id = any(${runIds}::bigint[]) order by id`;
  return rows.map((r) => r.state);
}

interface Interval {
  ti: string;
  try: string;
  task: string;
  agent: string;
  from: number;
  to: number;
}

/** Each attempt's life on its agent, from the events log: claimed (queued) → ended. */
async function attempts(runIds: string[]): Promise<Interval[]> {
  const ev = await f.db.sql<
    { ti_id: string; to: string; try: string; agent_id: string | null; task_id: string; at: Date }[]
  >`
    select ti_id, payload->>'to' as to, payload->>'try' as try, payload->>'agent_id' as agent_id, payload->>'task_id' as task_id, at
    from events where run_id = any(${runIds}::bigint[]) and kind = 'ti.state' order by seq`;
  const open = new Map<string, Interval>();
  const out: Interval[] = [];
  for (const e of ev) {
    const key = `${e.ti_id}/${e.try}`;
    if (e.to === 'queued')
      open.set(key, {
        ti: e.ti_id,
        try: e.try,
        task: e.task_id,
        agent: e.agent_id!,
        from: e.at.getTime(),
        to: Infinity,
      });
    else if (['success', 'failed', 'up_for_retry', 'cancelled'].includes(e.to) && open.has(key)) {
      const i = open.get(key)!;
      i.to = e.at.getTime();
      out.push(i);
      open.delete(key);
    }
  }
  return [...out, ...open.values()];
}

function maxConcurrent(intervals: Interval[]): number {
  const points = intervals.flatMap((i) => [
    { t: i.from, d: 1 },
    { t: i.to, d: -1 },
  ]);
  points.sort((a, b) => a.t - b.t || a.d - b.d);
  let cur = 0;
  let max = 0;
  for (const p of points) max = Math.max(max, (cur += p.d));
  return max;
}

describe('a fleet of agents', () => {
  it('places by labels, spreads load, and respects slots and max_parallel_per_agent', async () => {
    await agent('a1', ['--labels', 'zone=a', '--slots', '2']);
    await agent('a2', ['--labels', 'zone=a', '--slots', '1']);
    await agent('b1', ['--labels', 'zone=b', '--slots', '3']);
    // Each task records its own process's life (start and end, on the machine's clock).
    const lives = path.join(f.tmp, 'lives.log');
    const mark = (what: string) => `echo $LEOFLOW_TI_ID $LEOFLOW_TRY_NUMBER ${what} $(date +%s%N) >> ${lives}`;
    const sleepy = (id: string, zone: string, extra = '') =>
      `  - id: ${id}\n    executor: agents\n    command: ["sh", "-c", "${mark('start')}; sleep 0.4; echo ${id} done; ${mark('end')}"]\n    placement: { labels: { zone: ${zone} }${extra} }\n`;
    await apply(
      'place',
      'dag_id: place\ntasks:\n' +
        ['wa0', 'wa1', 'wa2', 'wa3'].map((t) => sleepy(t, 'a')).join('') +
        ['wb0', 'wb1', 'wb2'].map((t) => sleepy(t, 'b')).join(''),
    );
    await apply('maxpar', 'dag_id: maxpar\ntasks:\n' + sleepy('w', 'a', ', max_parallel_per_agent: 1'));

    const runIds = [(await f.api.workflow.triggerRun({ dagId: 'place' })).run!.runId];
    for (let i = 0; i < 4; i++) runIds.push((await f.api.workflow.triggerRun({ dagId: 'maxpar' })).run!.runId);
    expect(await waitRuns(runIds)).toEqual(Array(5).fill('success'));

    const all = await attempts(runIds);
    expect(all).toHaveLength(7 + 4);
    for (const i of all)
      expect(i.agent, `${i.task} placed on ${i.agent}`).toMatch(i.task.startsWith('wb') ? /^b1$/ : /^a[12]$/);
    // Load spread over both zone-a agents.
    expect(new Set(all.filter((i) => !i.task.startsWith('wb')).map((i) => i.agent))).toEqual(new Set(['a1', 'a2']));
    // Slots never exceeded: an agent's slot is free once its task's process is over (it may be
    // given the next attempt before that end is written), so count the processes' own lives.
    const agentOf = new Map(all.map((i) => [`${i.ti}/${i.try}`, i.agent]));
    const life = new Map<string, Interval>();
    for (const line of (await readFile(lives, 'utf8')).trim().split('\n')) {
      const [ti, tryNumber, what, ns] = line.split(' ') as [string, string, 'start' | 'end', string];
      const key = `${ti}/${tryNumber}`;
      const i =
        life.get(key) ??
        life
          .set(key, { ti, try: tryNumber, task: '', agent: agentOf.get(key)!, from: Infinity, to: Infinity })
          .get(key)!;
      i[what === 'start' ? 'from' : 'to'] = Number(BigInt(ns) / 1000n) / 1000;
    }
    expect(life.size).toBe(all.length);
    const lived = [...life.values()];
    expect(maxConcurrent(lived.filter((i) => i.agent === 'a1'))).toBeLessThanOrEqual(2);
    expect(maxConcurrent(lived.filter((i) => i.agent === 'a2'))).toBeLessThanOrEqual(1);
    expect(maxConcurrent(lived.filter((i) => i.agent === 'b1'))).toBeLessThanOrEqual(3);
    // And no agent was ever sent an attempt beyond the slots it offered (it would say so).
    for (const a of agents.started) expect(a.output()).not.toMatch(/Assign beyond the slots/);
    // max_parallel_per_agent: 1 for `w`, across its four runs.
    for (const a of ['a1', 'a2'])
      expect(maxConcurrent(all.filter((i) => i.task === 'w' && i.agent === a))).toBeLessThanOrEqual(1);
    // Placement rounds' claims (a task with max_parallel_per_agent is always claimed by one) have
    // a connection of their own, never waiting for one the report batches hold.
    const claimConns = await f.db.sql<{ query: string }[]>`
      select query from pg_stat_activity where datname = current_database() and application_name like 'leoflow-claims:%'`;
    expect(claimConns).toHaveLength(1);
    expect(claimConns[0]!.query).toMatch(/claimed as \(\s*update task_instances/);
    const logs = await cli(f.server.url, ['logs', runIds[0]!, '--task', 'wb0']);
    expect(logs.stdout).toMatch(/^\[wb0 #1\] wb0 done$/m);

    // Drained: new work goes elsewhere.
    await cli(f.server.url, ['agents', 'drain', 'a1']);
    const more = [];
    for (let i = 0; i < 3; i++) more.push((await f.api.workflow.triggerRun({ dagId: 'maxpar' })).run!.runId);
    expect(await waitRuns(more)).toEqual(Array(3).fill('success'));
    expect(new Set((await attempts(more)).map((i) => i.agent))).toEqual(new Set(['a2']));
    await cli(f.server.url, ['agents', 'drain', 'a1', '--undrain']);
  });

  it('retries elsewhere the work of an agent that is SIGKILLed, after the heartbeat threshold', async () => {
    const pidFile = path.join(f.tmp, 'k.pid');
    const k1 = await agent('k1', ['--labels', 'zone=k']);
    const k2 = await agent('k2', ['--labels', 'zone=k']);
    await apply(
      'kill',
      `dag_id: kill\ntasks:\n  - id: long\n    executor: agents\n    retries: 1\n    retry_delay: 100ms\n    placement: { labels: { zone: k } }\n    command: ["sh", "-c", "if [ $LEOFLOW_TRY_NUMBER -ge 2 ]; then echo second; exit 0; fi; echo $$ > ${pidFile}; sleep 30"]\n`,
    );
    const runId = (await f.api.workflow.triggerRun({ dagId: 'kill' })).run!.runId;
    const holder = await waitFor('long running', async () => {
      const [t] = await f.db.sql<
        { state: string; agent_id: string }[]
      >`select state, agent_id from task_instances where run_id = ${runId}`;
      return t?.state === 'running' && (await readFile(pidFile, 'utf8').catch(() => '')) ? t.agent_id : null;
    });
    const victim = holder === 'k1' ? k1 : k2;
    victim.child.kill('SIGKILL');
    // The agent's task runs under its shim and outlives it; this agent never comes back, so
    // stop the task as an operator (or the machine's end) would.
    killGroupOf(Number(await readFile(pidFile, 'utf8')));
    expect(await waitRuns([runId])).toEqual(['success']);
    const [t] = await f.db.sql<
      { try_number: number; agent_id: string }[]
    >`select try_number, agent_id from task_instances where run_id = ${runId}`;
    expect(t).toMatchObject({ try_number: 2, agent_id: holder === 'k1' ? 'k2' : 'k1' });
    const lost = await f.db.sql`select 1 from events where run_id = ${runId} and payload->>'reason' = 'agent_lost'`;
    expect(lost.length).toBe(1);
  });

  it('loses nothing and runs nothing twice across a network blip', async () => {
    const proxy = await startTcpProxy({ host: '127.0.0.1', port: Number(new URL(f.server.url).port) });
    try {
      const marks = path.join(f.tmp, 'blip.log');
      await agent('n1', ['--labels', 'zone=n', '--slots', '4'], `http://127.0.0.1:${proxy.port}`);
      await apply(
        'blip',
        'dag_id: blip\ntasks:\n' +
          [0, 1, 2, 3]
            .map(
              (i) =>
                `  - id: n${i}\n    executor: agents\n    placement: { labels: { zone: n } }\n    command: ["sh", "-c", "echo $LEOFLOW_TASK_ID $LEOFLOW_TRY_NUMBER >> ${marks}; echo start; sleep 1.5; echo end"]\n`,
            )
            .join(''),
      );
      const runId = (await f.api.workflow.triggerRun({ dagId: 'blip' })).run!.runId;
      await waitFor('all running', async () => {
        const rows = await f.db.sql<{ state: string }[]>`select state from task_instances where run_id = ${runId}`;
        return rows.every((r) => r.state === 'running');
      });
      proxy.cut();
      expect(await waitRuns([runId])).toEqual(['success']);
      const tis = await f.db.sql<
        { task_id: string; try_number: number; agent_id: string }[]
      >`select task_id, try_number, agent_id from task_instances where run_id = ${runId} order by task_id`;
      expect(tis.map((t) => [t.task_id, t.try_number, t.agent_id])).toEqual(
        [0, 1, 2, 3].map((i) => [`n${i}`, 1, 'n1']),
      );
      expect((await readFile(marks, 'utf8')).trim().split('\n').sort()).toEqual(['n0 1', 'n1 1', 'n2 1', 'n3 1']);
      // Every line, including those written while the stream was cut, is in the logs once.
      const logs = await f.db.sql<{ n: number }[]>`
        select count(*)::int as n from task_logs l join task_instances t on t.id = l.ti_id where t.run_id = ${runId} and l.stream = 'stdout'`;
      expect(logs[0]!.n).toBe(8);
      expect(
        (await f.db.sql`select 1 from events where run_id = ${runId} and payload->>'reason' = 'agent_lost'`).length,
      ).toBe(0);
    } finally {
      await proxy.close();
    }
  });

  it('refuses a frozen (zombie) agent its superseded attempt when it comes back', async () => {
    const pidFile = path.join(f.tmp, 'z.pid');
    const z1 = await agent('z1', ['--labels', 'zone=z']);
    const z2 = await agent('z2', ['--labels', 'zone=z']);
    await apply(
      'zombie',
      `dag_id: zombie\ntasks:\n  - id: slow\n    executor: agents\n    retries: 1\n    retry_delay: 100ms\n    placement: { labels: { zone: z } }\n    command: ["sh", "-c", "if [ $LEOFLOW_TRY_NUMBER -ge 2 ]; then echo try-2; exit 0; fi; echo $$ > ${pidFile}; sleep 6; echo try-1-late"]\n`,
    );
    const before = metricSum(await scrapeMetrics(f.server.metricsUrl), 'leoflow_stale_reports_rejected_total');
    const runId = (await f.api.workflow.triggerRun({ dagId: 'zombie' })).run!.runId;
    const holder = await waitFor('slow running', async () => {
      const [t] = await f.db.sql<
        { state: string; agent_id: string }[]
      >`select state, agent_id from task_instances where run_id = ${runId}`;
      return t?.state === 'running' && (await readFile(pidFile, 'utf8').catch(() => '')) ? t.agent_id : null;
    });
    const zombie = holder === 'z1' ? z1 : z2;
    zombie.child.kill('SIGSTOP');
    expect(await waitRuns([runId])).toEqual(['success']);
    const [done] = await f.db
      .sql`select try_number, state, agent_id, exit_code from task_instances where run_id = ${runId}`;
    expect(done).toMatchObject({ try_number: 2, state: 'success', agent_id: holder === 'z1' ? 'z2' : 'z1' });

    zombie.child.kill('SIGCONT');
    await waitFor(
      'zombie refused',
      async () => metricSum(await scrapeMetrics(f.server.metricsUrl), 'leoflow_stale_reports_rejected_total') > before,
      20_000,
    );
    const try1 = Number(await readFile(pidFile, 'utf8'));
    await processEnds(try1, 15_000, 'try 1 stopped');
    const [after] = await f.db
      .sql`select try_number, state, agent_id, exit_code from task_instances where run_id = ${runId}`;
    expect(after).toEqual(done);
    const late = await f.db
      .sql`select 1 from task_logs l join task_instances t on t.id = l.ti_id where t.run_id = ${runId} and l.line = 'try-1-late'`;
    expect(late.length).toBe(0);
  });
});
