import { readFile } from 'node:fs/promises';

/** CPU time (user + system) a process has used so far, in ms, from /proc/PID/stat (utime and
 *  stime, fields 14 and 15, in clock ticks of 10 ms). Its children's are not counted. */
export async function processCpuMs(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) * 10;
}
