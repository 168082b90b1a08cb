/** The API token of this tab: in sessionStorage, so it ends with the tab and is never on disk. */
const KEY = 'leoflow.token';

export function readToken(): string | null {
  return sessionStorage.getItem(KEY);
}

export function saveToken(token: string | null): void {
  if (token) sessionStorage.setItem(KEY, token);
  else sessionStorage.removeItem(KEY);
}
