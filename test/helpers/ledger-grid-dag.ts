import { writeFile } from 'node:fs/promises';

/**
 * Writes to `file` the DAG `wide`: `width` chains of `depth` agent tasks (each after the one above
 * it, up to 2 retries), each appending "RUN TASK TRY" to `ledger` and then sleeping
 * `sleepTenths(d, w)` tenths of a second, so a test can tell that every task ran once as try 1.
 */
export async function writeLedgerGridDag(
  file: string,
  ledger: string,
  o: { width: number; depth: number; sleepTenths: (d: number, w: number) => number },
): Promise<void> {
  const tasks: string[] = [];
  for (let d = 0; d < o.depth; d++) {
    for (let w = 0; w < o.width; w++) {
      const write = `echo $LEOFLOW_RUN_ID $LEOFLOW_TASK_ID $LEOFLOW_TRY_NUMBER >> ${ledger}`;
      tasks.push(
        `  - id: t${d}_${w}`,
        '    executor: agents',
        `    command: ["sh", "-c", "${write}; sleep 0.${o.sleepTenths(d, w)}"]`,
        '    retries: 2',
        '    retry_delay: 100ms',
        ...(d > 0 ? [`    depends_on: [t${d - 1}_${w}]`] : []),
      );
    }
  }
  await writeFile(file, ['dag_id: wide', 'tasks:', ...tasks, ''].join('\n'));
}
