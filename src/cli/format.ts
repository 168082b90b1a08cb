import { timestampDate, type Timestamp } from '@bufbuild/protobuf/wkt';

/** How the CLI shows things to a person. */

export { runStateName, taskStateName } from '../wire/state-names.js';

export function time(ts: Timestamp | undefined): string {
  if (!ts) return '-';
  const d = timestampDate(ts);
  const pad = (n: number, w = 2) => String(n).padStart(w, '0');
  return (
    `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`
  );
}

export function clock(d: Date): string {
  const pad = (n: number, w = 2) => String(n).padStart(w, '0');
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

export function formatElapsed(from: Timestamp | undefined, to: Timestamp | undefined): string {
  if (!from) return '-';
  const ms = (to ? timestampDate(to) : new Date()).getTime() - timestampDate(from).getTime();
  if (ms < 1000) return `${ms}ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)}s`;
  return `${Math.floor(ms / 60_000)}m${Math.round((ms % 60_000) / 1000)}s`;
}

/** A cell's width on screen: colour codes take none. */
// eslint-disable-next-line no-control-regex
const visible = (s: string) => s.replace(/\x1b\[[0-9;]*m/g, '').length;

/** A plain aligned table: columns as wide as their widest cell (coloured cells measured by their text). */
export function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => visible(r[i] ?? ''))));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c + ' '.repeat(Math.max(0, widths[i]! - visible(c)))))
      .join('  ')
      .trimEnd();
  return [line(header), ...rows.map(line)].join('\n');
}

/** A time for a machine to read (`-o json`): ISO 8601 in UTC, or null when unset. */
export function isoTime(ts: Timestamp | undefined): string | null {
  return ts ? timestampDate(ts).toISOString() : null;
}
