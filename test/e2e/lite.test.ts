import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { cli, waitFor } from '../helpers/leoflow-process.js';
import { scrapeMetrics } from '../helpers/scrape-metrics.js';
import { serverForFile } from '../helpers/server-fixture.js';
import { processEnds } from '../helpers/process-gone.js';
import { applyDag } from '../helpers/applied-dag.js';
import { runIdOf, showRun } from '../helpers/run-show.js';

/**
 * The Lite edition end to end, as a user drives it: the real `leoflow server` process on a real
 * Postgres, the examples applied with the real CLI, runs triggered and inspected with it.
 */

const show = (runId: string) => showRun(f.server.url, runId);

const f = serverForFile({
  tmpPrefix: 'leoflow-e2e-',
  args: ['--heartbeat-interval', '200ms', '--heartbeat-threshold', '5s', '--kill-grace', '300ms'],
});

describe('leoflow lite, end to end', () => {
  it('applies the examples with the CLI', async () => {
    const r = await cli(f.server.url, ['dag', 'apply', 'examples']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/examples\/hello\.yaml: DAG hello created \(version 1, 2 tasks\)/);
    expect(r.stdout).toMatch(/examples\/fan-out\.yaml: DAG fan_out created \(version 1, 5 tasks\)/);
    const again = await cli(f.server.url, ['dag', 'apply', 'examples/hello.yaml']);
    expect(again.stdout).toMatch(/DAG hello unchanged \(version 1/);
    const list = await cli(f.server.url, ['dag', 'list', '-o', 'json']);
    expect(JSON.parse(list.stdout).map((d: { dag_id: string }) => d.dag_id)).toEqual(['fan_out', 'hello']);
  });

  it('names the file when a DAG file is empty', async () => {
    const file = path.join(f.tmp, 'empty.yaml');
    await writeFile(file, '');
    const r = await cli(f.server.url, ['dag', 'apply', file]);
    expect(r.code).toBe(1);
    const rel = path.relative(process.cwd(), file);
    expect(r.stderr).toBe(
      `${rel}: invalid DAG:\n  ${rel}: (root): the file is empty; a DAG file needs at least dag_id and tasks\n`,
    );
  });

  it('runs hello to success with logs, exit codes and one try each', async () => {
    const r = await cli(f.server.url, ['run', 'trigger', 'hello', '--wait']);
    expect(r.code, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toMatch(/greet\s+success\s+try 1\/1, exit 0/);
    expect(r.stdout).toMatch(/^run \d+ success in [\d.]+s: 2 success$/m);
    const runId = runIdOf(r.stdout);
    const shown = await show(runId);
    expect(shown.state).toBe('success');
    for (const ti of shown.task_instances) {
      expect(ti).toMatchObject({ state: 'success', try_number: 1, exit_code: 0, error: null });
    }
    const logs = await cli(f.server.url, ['logs', runId]);
    expect(logs.code).toBe(0);
    expect(logs.stdout).toMatch(/^\[greet #1\] .+/m);
    expect(logs.stdout).toMatch(/^\[goodbye #1\] .+/m);
    expect(logs.stdout).toMatch(/^\[greet #1 leoflow\] exited with code 0$/m);
  });

  it('starts tasks that run side by side through the spawn helper, and counts them so', async () => {
    const file = path.join(f.tmp, 'side_by_side.yaml');
    await writeFile(
      file,
      'dag_id: side_by_side\ntasks:\n' +
        ['a', 'b', 'c']
          .map((id) => `  - id: ${id}\n    command: ["sh", "-c", "sleep 0.3; echo from ${id}"]\n`)
          .join(''),
    );
    expect((await cli(f.server.url, ['dag', 'apply', file])).code).toBe(0);
    const before = await scrapeMetrics(f.server.metricsUrl);
    const r = await cli(f.server.url, ['run', 'trigger', 'side_by_side', '--wait']);
    expect(r.code, r.stdout + r.stderr).toBe(0);
    const after = await scrapeMetrics(f.server.metricsUrl);
    const delta = (how: string) =>
      (after.get(`leoflow_task_starts_total{how="${how}"}`) ?? 0) -
      (before.get(`leoflow_task_starts_total{how="${how}"}`) ?? 0);
    // At most one of the three was a lone start; the others found an attempt running.
    expect(delta('spawn') + delta('ready_shell') + delta('spawn_helper')).toBe(3);
    expect(delta('spawn_helper')).toBeGreaterThanOrEqual(2);
    const logs = await cli(f.server.url, ['logs', runIdOf(r.stdout)]);
    for (const id of ['a', 'b', 'c']) expect(logs.stdout).toMatch(new RegExp(`^\\[${id} #1\\] from ${id}$`, 'm'));
  });

  it("starts a chain's next task from the ready shell, and counts how each task was started", async () => {
    await applyDag(
      f.server.url,
      f.tmp,
      'dag_id: ready_chain\ntasks:\n  - id: a\n    command: ["sleep", "0.05"]\n  - id: b\n    command: ["sh", "-c", "echo from b"]\n    depends_on: [a]\n',
    );
    const before = await scrapeMetrics(f.server.metricsUrl);
    const r = await cli(f.server.url, ['run', 'trigger', 'ready_chain', '--wait']);
    expect(r.code, r.stdout + r.stderr).toBe(0);
    const after = await scrapeMetrics(f.server.metricsUrl);
    const delta = (how: string) =>
      (after.get(`leoflow_task_starts_total{how="${how}"}`) ?? 0) -
      (before.get(`leoflow_task_starts_total{how="${how}"}`) ?? 0);
    // Both tasks were started; b, alone and after a ran 50 ms, from the shell made meanwhile.
    expect(delta('spawn') + delta('ready_shell') + delta('spawn_helper')).toBe(2);
    expect(delta('ready_shell')).toBeGreaterThanOrEqual(1);
    const logs = await cli(f.server.url, ['logs', runIdOf(r.stdout), '--task', 'b']);
    expect(logs.stdout).toMatch(/^\[b #1 leoflow\] started pid \d+: sh -c 'echo from b'$/m);
    expect(logs.stdout).toMatch(/^\[b #1\] from b$/m);
    expect(logs.stdout).toMatch(/^\[b #1 leoflow\] exited with code 0$/m);
  });

  it('runs the fan-out example: flaky fails once, is retried and succeeds', async () => {
    const r = await cli(f.server.url, ['run', 'trigger', 'fan_out', '--wait']);
    expect(r.code, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toMatch(/flaky\s+up_for_retry\s+try 1\/3, exit 1/);
    const runId = runIdOf(r.stdout);
    const shown = await show(runId);
    const byTask = new Map(shown.task_instances.map((t) => [t.task_id, t]));
    expect(byTask.get('flaky')).toMatchObject({ state: 'success', try_number: 2, exit_code: 0 });
    for (const id of ['start', 'count', 'sum', 'join'])
      expect(byTask.get(id)).toMatchObject({ state: 'success', try_number: 1, exit_code: 0 });
    const logs = await cli(f.server.url, ['logs', runId, '--task', 'flaky']);
    expect(logs.stdout).toMatch(/^\[flaky #1 stderr\] flaky: failing on try 1$/m);
    expect(logs.stdout).toMatch(/^\[flaky #2\] flaky: ok on try 2$/m);
    const try1 = await cli(f.server.url, ['logs', runId, '--task', 'flaky', '--try', '1']);
    expect(try1.stdout).not.toMatch(/ok on try 2/);
  });

  it('fails a run whose task fails for good: exit code, upstream_failed, non-zero CLI exit', async () => {
    await applyDag(
      f.server.url,
      f.tmp,
      `dag_id: broken\ntasks:\n  - id: boom\n    command: "echo about to fail; exit 7"\n  - id: after\n    command: [echo, never]\n    depends_on: [boom]\n`,
    );
    const r = await cli(f.server.url, ['run', 'trigger', 'broken', '--wait']);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/^run \d+ failed in/m);
    const shown = await show(runIdOf(r.stdout));
    const byTask = new Map(shown.task_instances.map((t) => [t.task_id, t]));
    expect(byTask.get('boom')).toMatchObject({ state: 'failed', try_number: 1, exit_code: 7, error: 'exit code 7' });
    expect(byTask.get('after')).toMatchObject({ state: 'upstream_failed', try_number: 0 });
  });

  it('enforces a task timeout: SIGTERM, then SIGKILL after the grace period', async () => {
    await applyDag(
      f.server.url,
      f.tmp,
      `dag_id: slow\ntasks:\n  - id: stubborn\n    command: ["sh", "-c", "trap '' TERM; echo started; sleep 30"]\n    timeout: 1s\n`,
    );
    const started = Date.now();
    const r = await cli(f.server.url, ['run', 'trigger', 'slow', '--wait']);
    expect(r.code).toBe(1);
    expect(Date.now() - started).toBeLessThan(10_000);
    const shown = await show(runIdOf(r.stdout));
    expect(shown.task_instances[0]).toMatchObject({
      state: 'failed',
      exit_code: null,
      error: 'timed out after 1000 ms',
    });
  });

  it('cancels a running run: the process group is stopped and the TIs end cancelled', async () => {
    const file = path.join(f.tmp, 'long.yaml');
    const marker = path.join(f.tmp, 'long.pid');
    await writeFile(
      file,
      `dag_id: long\ntasks:\n  - id: sleeper\n    command: ["sh", "-c", "echo $$ > ${marker}; sleep 60"]\n  - id: next\n    command: [echo, next]\n    depends_on: [sleeper]\n`,
    );
    expect((await cli(f.server.url, ['dag', 'apply', file])).code).toBe(0);
    const t = await cli(f.server.url, ['run', 'trigger', 'long']);
    const runId = runIdOf(t.stdout);
    await waitFor(
      'sleeper running',
      async () => (await show(runId)).task_instances.find((x) => x.task_id === 'sleeper')?.state === 'running',
    );
    const { readFile } = await import('node:fs/promises');
    const pid = Number(await waitFor('pid file', () => readFile(marker, 'utf8').catch(() => null)));
    const c = await cli(f.server.url, ['run', 'cancel', runId]);
    expect(c.stdout.trim()).toBe(`run ${runId} cancelled`);
    await processEnds(pid, 5000, 'process gone');
    const shown = await show(runId);
    expect(shown.state).toBe('cancelled');
    expect(shown.task_instances.map((x) => x.state)).toEqual(['cancelled', 'cancelled']);
    const again = await cli(f.server.url, ['run', 'cancel', runId]);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/failed_precondition.*run \d+ has already ended \(cancelled\)/);
  });

  it('rejects an invalid DAG file with the file, field and reason, and writes nothing', async () => {
    const file = path.join(f.tmp, 'bad.yaml');
    await writeFile(
      file,
      `dag_id: bad\ntasks:\n  - id: a\n    command: [echo, a]\n    depends_on: [c]\n    retries: lots\n  - id: c\n    command: [echo, c]\n    depends_on: [a]\n`,
    );
    const r = await cli(f.server.url, ['dag', 'apply', file]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('bad.yaml');
    expect(r.stderr).toMatch(/tasks\[0\]\.retries/);
    expect(r.stderr).toMatch(/cycle: a → c → a|cycle: c → a → c/);
    const list = await cli(f.server.url, ['dag', 'list', '-o', 'json']);
    expect(JSON.parse(list.stdout).map((d: { dag_id: string }) => d.dag_id)).not.toContain('bad');
    const rows = await f.db.sql`select 1 from dags where dag_id = 'bad'`;
    expect(rows.length).toBe(0);
  });

  it('answers unknown ids and bad arguments with clear errors', async () => {
    const unknownRun = await cli(f.server.url, ['run', 'show', '999999']);
    expect(unknownRun.code).toBe(1);
    expect(unknownRun.stderr).toMatch(/not_found.*run 999999 not found/);
    const unknownDag = await cli(f.server.url, ['run', 'trigger', 'nope']);
    expect(unknownDag.stderr).toMatch(/not_found.*DAG "nope" not found/);
    const badConf = await cli(f.server.url, ['run', 'trigger', 'hello', '--conf', '[1,2]']);
    expect(badConf.stderr).toMatch(/invalid_argument.*conf_json: must be a JSON object/);
    const badCmd = await cli(f.server.url, ['run', 'frobnicate']);
    expect(badCmd.code).toBe(2);
    expect(badCmd.stderr).toMatch(/unknown command 'frobnicate'/);
  });

  it('tells the user when the control plane cannot be reached', async () => {
    const r = await cli('http://127.0.0.1:9', ['dag', 'list']);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/cannot reach the control plane at http:\/\/127\.0\.0\.1:9/);
  });

  it('reports the leader through the API', async () => {
    const { createClients } = await import('../../src/cli/client.js');
    const leader = await waitFor('a leader', async () => {
      const r = await createClients(f.server.url).cluster.getLeader({});
      return r.leaderId ? r : null;
    });
    expect(leader.leaderId).toBe(leader.replicaId);
    expect(leader.edition).toBe('lite');
  });
});
