import { expect } from 'vitest';
import type { Clients } from '../../src/cli/client.js';

/** A task's command in a DAG file: a string runs in a shell, a list as it is. */
export type DagCommand = string | readonly string[];

/**
 * The map DAG of the mapped-task tests: `gen` writes an output holding `items`, `each` maps over
 * gen.items (with `eachLines` added to it), and `collect` runs after all of them. `taskLines` are
 * added to every task (`executor: agents`, say).
 */
export function mapDag(o: {
  dagId: string;
  gen: DagCommand;
  each: DagCommand;
  collect: DagCommand;
  taskLines?: readonly string[];
  eachLines?: readonly string[];
  /** The map's `max_parallel`: how many mapped instances run at once. */
  maxParallel?: number;
}): string[] {
  const task = (id: string, command: DagCommand, lines: readonly string[] = []) => [
    `  - id: ${id}`,
    ...(o.taskLines ?? []).map((l) => `    ${l}`),
    `    command: ${JSON.stringify(command)}`,
    ...lines.map((l) => `    ${l}`),
  ];
  return [
    `dag_id: ${o.dagId}`,
    'tasks:',
    ...task('gen', o.gen),
    ...task('each', o.each, [
      'depends_on: [gen]',
      `map: { over: gen.items${o.maxParallel ? `, max_parallel: ${o.maxParallel}` : ''} }`,
      ...(o.eachLines ?? []),
    ]),
    ...task('collect', o.collect, ['depends_on: [each]']),
  ];
}

/** `sh -c SCRIPT` as a task's command. */
export const sh = (script: string): string[] => ['sh', '-c', script];

/** `s` quoted for `sh`, whatever it holds. */
export function shellQuote(s: string): string {
  return `'${s.replaceAll("'", `'\\''`)}'`;
}

/** A `gen` command whose output is {"items": items}. */
export const genItems = (items: readonly unknown[]): string =>
  `printf '%s' ${shellQuote(JSON.stringify({ items }))} > "$LEOFLOW_OUTPUT"`;

/** An `each` command whose output is {"i": its map index, "item": its item}. */
export const EACH_INDEX_AND_ITEM = `printf '{"i": %s, "item": %s}' "$LEOFLOW_MAP_INDEX" "$LEOFLOW_MAP_ITEM" > "$LEOFLOW_OUTPUT"`;

/** A `collect` command whose output is its inputs: the mapped outputs in item order. */
export const COLLECT_INPUTS = 'cp "$LEOFLOW_INPUTS" "$LEOFLOW_OUTPUT"';

/** The commands of a map of `items` whose instances hand back their index and item, collected in item order. */
export const echoMap = (items: readonly unknown[]): { gen: string[]; each: string[]; collect: string[] } => ({
  gen: sh(genItems(items)),
  each: sh(EACH_INDEX_AND_ITEM),
  collect: sh(COLLECT_INPUTS),
});

/** `collect` (COLLECT_INPUTS) got each item's EACH_INDEX_AND_ITEM output, in item order. */
export async function expectCollectedInItemOrder(
  api: Clients,
  runId: string,
  items: readonly unknown[],
): Promise<void> {
  const collected = await api.workflow.getTaskOutput({ runId, taskId: 'collect' });
  expect(JSON.parse(collected.outputs[0]!.json)).toEqual({ each: items.map((item, i) => ({ i, item })) });
}
