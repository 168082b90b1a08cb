/**
 * The DAG parser pool runs its worker from the compiled tree, so this test imports `dist/`:
 * build first with `npx tsc -p tsconfig.build.json`. Types come from the sources.
 */
import { existsSync, readFileSync } from 'node:fs';

import { afterEach, describe, expect, it } from 'vitest';

type DagParserModule = typeof import('../../src/server/dags/dag-parser.js');
type DagSpecModule = typeof import('../../src/core/dag-spec.js');

const dist = (path: string): URL => new URL(`../../dist/${path}`, import.meta.url);
for (const path of ['server/dags/dag-parser.js', 'server/dags/parse-dag-worker.js', 'core/dag/parse-dag.js']) {
  if (!existsSync(dist(path))) throw new Error(`dist/${path} is missing: run \`npx tsc -p tsconfig.build.json\` first`);
}
// The same module instances the pool uses, so instanceof holds.
const { createDagParser, DagParserError } = (await import(dist('server/dags/dag-parser.js').href)) as DagParserModule;
const { DagValidationError } = (await import(dist('core/dag-spec.js').href)) as DagSpecModule;

type DagParser = ReturnType<DagParserModule['createDagParser']>;
const open: DagParser[] = [];
function parser(opts: Parameters<DagParserModule['createDagParser']>[0] = {}): DagParser {
  const p = createDagParser(opts);
  open.push(p);
  return p;
}
afterEach(async () => {
  await Promise.all(open.splice(0).map((p) => p.close()));
});

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (err) {
    return err;
  }
  throw new Error('expected the promise to reject');
}

const examples = new URL('../../examples/', import.meta.url);

/** A valid DAG of 10,000 tasks in a chain, just under 1 MiB: a few seconds of YAML parsing. */
function bigChain(): string {
  const lines = Array.from({ length: 10_000 }, (_, i) =>
    i === 0
      ? '  - {id: t0, command: x}'
      : `  - {id: t${i}, command: "echo task number ${i} of a long chain, padded", depends_on: [t${i - 1}]}`,
  );
  return `dag_id: big\ntasks:\n${lines.join('\n')}\n`;
}

describe('createDagParser', () => {
  it('parses a valid file on a worker thread', async () => {
    const spec = await parser().parse(readFileSync(new URL('fan-out.yaml', examples), 'utf8'), 'examples/fan-out.yaml');
    expect(spec.dagId).toBe('fan_out');
    expect(spec.tasks.map((t) => t.id)).toEqual(['start', 'count', 'sum', 'flaky', 'join']);
    expect(spec.tasks.find((t) => t.id === 'flaky')).toMatchObject({ retries: 2, retryDelayMs: 1_000 });
  });

  it('rebuilds a DagValidationError with every issue from an invalid file', async () => {
    const source =
      'dag_id: t\ntasks:\n  - {id: a, command: x, depends_on: [b]}\n  - {id: b, command: x, depends_on: [a], retries: -1}\n';
    const err = await rejection(parser().parse(source, 'dags/bad.yaml'));
    expect(err).toBeInstanceOf(DagValidationError);
    const e = err as InstanceType<DagSpecModule['DagValidationError']>;
    expect(e.file).toBe('dags/bad.yaml');
    expect(e.issues).toEqual([
      { path: 'tasks[1].retries', message: 'expected an integer from 0 to 100, got -1' },
      { path: 'tasks[0].depends_on[0]', message: 'cycle: a → b → a' },
    ]);
    expect(e.message).toBe(
      'dags/bad.yaml: invalid DAG:\n' +
        '  dags/bad.yaml: tasks[1].retries: expected an integer from 0 to 100, got -1\n' +
        '  dags/bad.yaml: tasks[0].depends_on[0]: cycle: a → b → a',
    );
  });

  it("refuses placement on a task of the server's default executor when that default is not agents", async () => {
    const source = 'dag_id: p\ntasks:\n  - {id: a, command: x, placement: {labels: {gpu: nvidia}}}\n';
    for (const defaultExecutor of ['subprocess', 'kubernetes']) {
      const err = await rejection(parser({ defaultExecutor }).parse(source, 'dags/p.yaml'));
      expect(err).toBeInstanceOf(DagValidationError);
      expect((err as InstanceType<DagSpecModule['DagValidationError']>).issues).toEqual([
        {
          path: 'tasks[0].placement',
          message: `applies only to tasks with executor: agents; this task's executor is ${defaultExecutor} (the server's default)`,
        },
      ]);
    }
    // Where the default is agents, placement chooses among them.
    expect((await parser({ defaultExecutor: 'agents' }).parse(source, 'dags/p.yaml')).tasks[0]!.placement).toEqual({
      labels: { gpu: 'nvidia' },
      capabilities: [],
      allowedAgents: [],
      forbiddenAgents: [],
      maxParallelPerAgent: null,
    });
  });

  it("refuses a task that names the control plane's own namespace (its Secrets, its ServiceAccount)", async () => {
    const source = [
      'dag_id: k',
      'tasks:',
      '  - id: steal',
      '    executor: kubernetes',
      '    command: [sh, -c, echo $DB]',
      '    env: {DB: {secret: {kubernetes: {name: leoflow-database, key: url}}}}',
      '    kubernetes: {namespace: leoflow, service_account: leoflow}',
      '  - {id: ok, executor: kubernetes, command: x, kubernetes: {namespace: ml}}',
      '',
    ].join('\n');
    const err = await rejection(parser({ controlPlaneNamespace: 'leoflow' }).parse(source, 'dags/k.yaml'));
    expect(err).toBeInstanceOf(DagValidationError);
    expect((err as InstanceType<DagSpecModule['DagValidationError']>).issues).toEqual([
      {
        path: 'tasks[0].kubernetes.namespace',
        message:
          '"leoflow" is the control plane\'s own namespace: its Secrets (the database URL, the admin token) and its ServiceAccount are not for tasks; leave namespace out (the tasks\' namespace) or name another',
      },
    ]);
    // Without it (no in-cluster control plane), the namespace is the DAG's business.
    expect((await parser().parse(source, 'dags/k.yaml')).tasks[0]!.kubernetes!.namespace).toBe('leoflow');
  });

  it('fails an alias bomb fast', async () => {
    const levels = 'abcdefghij'.split('');
    const bomb = levels
      .map(
        (k, i) =>
          `${k}: &${k} [${
            i === 0
              ? Array(10).fill('"lol"').join(', ')
              : Array(10)
                  .fill(`*${levels[i - 1]}`)
                  .join(', ')
          }]`,
      )
      .join('\n');
    const started = performance.now();
    const err = await rejection(parser({ timeoutMs: 10_000 }).parse(bomb, 'bomb.yaml'));
    expect(err).toBeInstanceOf(DagValidationError);
    expect((err as InstanceType<DagSpecModule['DagValidationError']>).issues).toEqual([
      {
        path: '',
        message: 'invalid YAML: too many alias expansions (limit 100); the document looks like an alias bomb',
      },
    ]);
    expect(performance.now() - started).toBeLessThan(3_000);
  });

  it('refuses an oversized file without sending it to a worker', async () => {
    const err = await rejection(parser().parse(`# ${'x'.repeat(2 * 1024 * 1024)}\n`, 'huge.yaml'));
    expect(err).toBeInstanceOf(DagValidationError);
    expect((err as Error).message).toBe(
      'huge.yaml: invalid DAG:\n  huge.yaml: (root): the DAG file is 2097155 bytes; the limit is 1048576 bytes (1 MiB)',
    );
  });

  it('rejects a parse that takes longer than timeoutMs, then keeps working', async () => {
    // 400 ms: under the big file's parse time (0.6–1.1 s on an idle 2-core machine, more under
    // load: 1 s was not, and the parse sometimes won), over a cold worker's first small parse.
    const p = parser({ maxThreads: 1, timeoutMs: 400 });
    const big = bigChain();
    expect(big.length).toBeLessThan(1024 * 1024);
    const started = performance.now();
    const err = await rejection(p.parse(big, 'slow.yaml'));
    expect(err).toBeInstanceOf(DagParserError);
    expect(err).toMatchObject({ reason: 'timeout', file: 'slow.yaml' });
    expect((err as Error).message).toBe('slow.yaml: the DAG file took longer than 400 ms to parse');
    expect(performance.now() - started).toBeLessThan(3_000);
    // The stuck worker was terminated; a fresh one takes the next files. Its first parse, cold (a
    // worker's start and imports), can itself pass 400 ms on a loaded machine (a fresh clone's run
    // did): the parser keeps working if one of three takes it.
    const hello = readFileSync(new URL('hello.yaml', examples), 'utf8');
    let spec: Awaited<ReturnType<typeof p.parse>> | null = null;
    for (let i = 0; i < 3 && spec === null; i++) {
      spec = await p.parse(hello, 'examples/hello.yaml').catch((e: unknown) => {
        expect(e).toMatchObject({ reason: 'timeout' });
        return null;
      });
    }
    expect(spec?.dagId).toBe('hello');
  });

  it('refuses a parse when the queue is full', async () => {
    const p = parser({ maxThreads: 1, maxQueue: 1 });
    const source = readFileSync(new URL('hello.yaml', examples), 'utf8');
    const first = p.parse(source, 'one.yaml');
    const second = p.parse(source, 'two.yaml');
    const err = await rejection(p.parse(source, 'three.yaml'));
    expect(err).toBeInstanceOf(DagParserError);
    expect(err).toMatchObject({ reason: 'overloaded', file: 'three.yaml' });
    expect((err as Error).message).toBe(
      'three.yaml: the DAG parser is busy (2 parses in flight, limit 2); try again later',
    );
    expect((await first).dagId).toBe('hello');
    expect((await second).dagId).toBe('hello');
  });

  it('refuses parses after close', async () => {
    const p = parser();
    await p.close();
    const err = await rejection(p.parse('dag_id: t\n', 'late.yaml'));
    expect(err).toMatchObject({ reason: 'closed', message: 'late.yaml: the DAG parser is closed' });
  });

  it('validates its options with exact messages', () => {
    expect(() => createDagParser({ maxThreads: 0 })).toThrow(
      new TypeError('opts.maxThreads must be a positive integer'),
    );
    expect(() => createDagParser({ timeoutMs: 1.5 })).toThrow(
      new TypeError('opts.timeoutMs must be a positive integer'),
    );
    expect(() => createDagParser({ maxQueue: -1 })).toThrow(
      new TypeError('opts.maxQueue must be a non-negative integer'),
    );
  });
});
