import { useState } from 'react';

/** Copies `text` to the clipboard (loopback and https pages may), saying so for a moment. */
export function CopyButton({ text, label }: { text: string; label: string }) {
  const [copied, setCopied] = useState(false);
  const copy = () =>
    navigator.clipboard.writeText(text).then(
      () => {
        setCopied(true);
        setTimeout(() => setCopied(false), 1_500);
      },
      () => setCopied(false),
    );
  return (
    <button className="quiet small" onClick={() => void copy()} aria-label={`copy ${label}`}>
      {copied ? 'copied' : 'copy'}
    </button>
  );
}
