import { Code, ConnectError } from '@connectrpc/connect';
import { expect } from 'vitest';

/** Expects the call to fail with `code` and a message matching `message`, as a client sees it. */
export async function rejectsWith(p: Promise<unknown>, code: Code, message: RegExp): Promise<void> {
  try {
    await p;
  } catch (err) {
    const ce = ConnectError.from(err);
    expect(Code[ce.code], ce.message).toBe(Code[code]);
    expect(ce.rawMessage).toMatch(message);
    return;
  }
  throw new Error('expected the call to fail');
}
