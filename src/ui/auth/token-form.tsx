import { useState, type FormEvent } from 'react';
import { saveToken } from './token-store.js';

/** Asks for an API token (the server requires one); kept for this tab only. */
export function TokenForm({ message, onSaved }: { message: string; onSaved(): void }) {
  const [token, setToken] = useState('');
  const submit = (e: FormEvent) => {
    e.preventDefault();
    saveToken(token.trim());
    onSaved();
  };
  return (
    <form className="card token-form" onSubmit={submit}>
      <h2>API token</h2>
      <p>This server requires a token. It is kept in this tab only (session storage).</p>
      <input
        type="password"
        name="token"
        aria-label="API token"
        value={token}
        onChange={(e) => setToken(e.target.value)}
        placeholder="lf_…"
        autoFocus
      />
      <button type="submit" disabled={!token.trim()}>
        Use token
      </button>
      {message && <p className="muted small">{message}</p>}
    </form>
  );
}
