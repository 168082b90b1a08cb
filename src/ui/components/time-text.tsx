import { timestampDate, type Timestamp } from '@bufbuild/protobuf/wkt';

/** A timestamp as local date and time; a dash when unset. */
export function formatTime(t: Timestamp | undefined): string {
  if (!t) return '—';
  const d = timestampDate(t);
  return d.toLocaleString(undefined, { dateStyle: 'short', timeStyle: 'medium' });
}

/** From start to end (or now), as `1m 04s`. */
export function durationText(start: Timestamp | undefined, end: Timestamp | undefined): string {
  if (!start) return '—';
  const ms = (end ? timestampDate(end).getTime() : Date.now()) - timestampDate(start).getTime();
  if (ms < 1_000) return `${Math.max(0, ms)} ms`;
  const s = Math.round(ms / 1_000);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  return m < 60
    ? `${m}m ${String(s % 60).padStart(2, '0')}s`
    : `${Math.floor(m / 60)}h ${String(m % 60).padStart(2, '0')}m`;
}

export function TimeText({ at }: { at: Timestamp | undefined }) {
  return <time>{formatTime(at)}</time>;
}
