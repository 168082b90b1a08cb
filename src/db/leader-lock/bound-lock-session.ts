import type pg from 'pg';

/** Ends the lock session after this long idle, so a frozen leader loses the lock (Postgres 14+). */
export async function setIdleSessionTimeout(c: pg.Client, ms: number): Promise<void> {
  await c.query(`set idle_session_timeout = ${Math.round(ms)}`);
}

/** Lets the server notice a closed socket during a lock wait within this long (Postgres 14+). */
export async function setConnectionCheckInterval(c: pg.Client, ms: number): Promise<void> {
  await c.query(`set client_connection_check_interval = ${Math.round(ms)}`);
}
