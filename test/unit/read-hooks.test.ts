import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { readHooks } from '../../src/server/config/read-hooks.js';

const dir = mkdtempSync(path.join(os.tmpdir(), 'leoflow-read-hooks-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function hooksOf(yaml: string): ReturnType<typeof readHooks> {
  const file = path.join(dir, 'hooks.yaml');
  writeFileSync(file, yaml);
  return readHooks(file, dir);
}

describe('the hooks file', () => {
  it('is read with its defaults, and a file secret without its last newline', () => {
    writeFileSync(path.join(dir, 'key'), 'sixteen-bytes-key-here\n');
    expect(hooksOf('hooks:\n  - name: a\n    secret: { file: key }\n  - { name: b, key_header: X-Id }\n')).toEqual([
      {
        name: 'a',
        event: 'a',
        secret: Buffer.from('sixteen-bytes-key-here'),
        signatureHeader: 'x-hub-signature-256',
        keyHeader: null,
      },
      { name: 'b', event: 'b', secret: null, signatureHeader: 'x-hub-signature-256', keyHeader: 'x-id' },
    ]);
  });

  it.each([
    ['hooks: 1', /expected a mapping with a list `hooks`/],
    ['hooks: [{ name: a, sekret: {} }]', /hooks\[0\]\.sekret: unknown key; allowed: name, event, secret/],
    ['hooks: [{ name: a }, { name: a }]', /hooks\[1\]\.name: "a" is named twice/],
    ['hooks: [{ name: "a b" }]', /hooks\[0\]\.name must be 1-100 letters/],
    ['hooks: [{ name: a, event: "x y" }]', /hooks\[0\]\.event must be 1-200 characters/],
    ['hooks: [{ name: a, secret: "the key itself" }]', /must be \{ env: NAME \} or \{ file: PATH \}/],
    ['hooks: [{ name: a, secret: { env: LEOFLOW_TEST_UNSET_VAR } }]', /LEOFLOW_TEST_UNSET_VAR is not set/],
    ['hooks: [{ name: a, secret: { file: nowhere } }]', /cannot read .*nowhere: ENOENT/],
    ['hooks: [{ name: a, key_header: "X Id" }]', /key_header must be an HTTP header name/],
  ])('refuses %s', (yaml, message) => {
    expect(() => hooksOf(yaml)).toThrow(message);
  });

  it('refuses a short key', () => {
    writeFileSync(path.join(dir, 'short'), 'short');
    expect(() => hooksOf('hooks: [{ name: a, secret: { file: short } }]')).toThrow(
      /the key must be at least 16 bytes, got 5/,
    );
  });
});
