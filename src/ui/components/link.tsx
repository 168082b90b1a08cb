import type { MouseEvent, ReactNode } from 'react';
import { navigate } from '../live/use-route.js';

/** An in-app link: a real href (open in a new tab works), followed without a reload. */
export function Link({ to, children, className }: { to: string; children: ReactNode; className?: string }) {
  const onClick = (e: MouseEvent) => {
    if (e.metaKey || e.ctrlKey || e.shiftKey || e.button !== 0) return;
    e.preventDefault();
    navigate(to);
  };
  return (
    <a href={to} onClick={onClick} className={className}>
      {children}
    </a>
  );
}
