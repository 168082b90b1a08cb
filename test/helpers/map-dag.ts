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
    ...task('each', o.each, ['depends_on: [gen]', 'map: { over: gen.items }', ...(o.eachLines ?? [])]),
    ...task('collect', o.collect, ['depends_on: [each]']),
  ];
}

/** `sh -c SCRIPT` as a task's command. */
export const sh = (script: string): string[] => ['sh', '-c', script];
