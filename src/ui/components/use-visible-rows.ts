import { useCallback, useState, type UIEvent } from 'react';

/** Rows drawn above and below the visible ones, so a fast scroll does not show blanks. */
const OVERSCAN = 10;

/**
 * Which of `count` fixed-height rows a scroll box of `viewport` pixels shows, with the padding
 * that stands in for the rows not drawn: a 10,000-task run draws ~40 rows, not 10,000.
 */
export function useVisibleRows(count: number, rowHeight: number, viewport: number) {
  const [top, setTop] = useState(0);
  const onScroll = useCallback((e: UIEvent<HTMLElement>) => setTop(e.currentTarget.scrollTop), []);
  const first = Math.max(0, Math.floor(top / rowHeight) - OVERSCAN);
  const last = Math.min(count, Math.ceil((top + viewport) / rowHeight) + OVERSCAN);
  return {
    first,
    last,
    padTop: first * rowHeight,
    padBottom: (count - last) * rowHeight,
    onScroll,
  };
}
