/**
 * A DAG of `n` tasks that fans out and joins (each task after a quarter-way parent and the one
 * seven before it), for timing the dashboard's graph: wide and deep enough to make a layout work.
 */
export function wideDagSource(dagId: string, n: number): string {
  const lines = [`dag_id: ${dagId}`, 'tasks:'];
  for (let i = 0; i < n; i++) {
    const ups = [Math.floor((i - 1) / 4), i - 7].filter((u) => i > 0 && u >= 0 && u < i).map((u) => `t${u}`);
    lines.push(
      `  - id: t${i}`,
      `    command: "true"`,
      ...(ups.length ? [`    depends_on: [${[...new Set(ups)].join(', ')}]`] : []),
    );
  }
  return lines.join('\n');
}
