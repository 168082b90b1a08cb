/**
 * The receivers of notifications (`--notify FILE`), and the rules for DAGs that name none:
 *
 *   receivers:
 *     - name: ops-slack
 *       url: { env: SLACK_WEBHOOK_URL }   # or { file: /run/secrets/slack-url }
 *       format: slack                     # or json (the default)
 *   defaults:
 *     - on: [failed]
 *       to: ops-slack
 *
 * A receiver's URL is a secret reference: a Slack webhook URL is itself the credential.
 */
import { readFileSync } from 'node:fs';
import { parse } from 'yaml';
import { readNotify } from '../../core/dag/read-notify.js';
import { RECEIVER_NAME, RECEIVER_NAME_RULE, type NotifyRule } from '../../core/notify-rule.js';
import { readSecretSetting } from './read-secret-setting.js';

export const NOTIFY_FORMATS = ['json', 'slack'] as const;
export type NotifyFormat = (typeof NOTIFY_FORMATS)[number];

export interface Receiver {
  name: string;
  url: URL;
  format: NotifyFormat;
}

export interface NotifySettings {
  receivers: Map<string, Receiver>;
  defaults: NotifyRule[];
}

const FILE_KEYS = ['receivers', 'defaults'];
const RECEIVER_KEYS = ['name', 'url', 'format'];

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

export const NO_NOTIFY: NotifySettings = { receivers: new Map(), defaults: [] };

/** The file's receivers and defaults, checked; throws naming the field at fault. */
export function readNotifyFile(file: string, cwd: string): NotifySettings {
  let doc: unknown;
  try {
    doc = parse(readFileSync(file, 'utf8'));
  } catch (err) {
    const why = (err as NodeJS.ErrnoException).code ?? (err as Error).message.split('\n')[0];
    throw new Error(`cannot read ${file}: ${why}`);
  }
  if (!isObj(doc) || !Array.isArray(doc.receivers))
    throw new Error(`${file}: expected a mapping with a list \`receivers\` (and, if any, \`defaults\`)`);
  for (const k of Object.keys(doc))
    if (!FILE_KEYS.includes(k)) throw new Error(`${file}: ${k}: unknown key; allowed: ${FILE_KEYS.join(', ')}`);
  const receivers = new Map<string, Receiver>();
  doc.receivers.forEach((r, i) => {
    const at = `${file}: receivers[${i}]`;
    if (!isObj(r)) throw new Error(`${at} must be a mapping (${RECEIVER_KEYS.join(', ')})`);
    for (const k of Object.keys(r))
      if (!RECEIVER_KEYS.includes(k)) throw new Error(`${at}.${k}: unknown key; allowed: ${RECEIVER_KEYS.join(', ')}`);
    if (typeof r.name !== 'string' || !RECEIVER_NAME.test(r.name))
      throw new Error(`${at}.name must be ${RECEIVER_NAME_RULE}`);
    if (receivers.has(r.name)) throw new Error(`${at}.name: "${r.name}" is named twice`);
    const format = r.format ?? 'json';
    if (!(NOTIFY_FORMATS as readonly unknown[]).includes(format))
      throw new Error(`${at}.format must be one of ${NOTIFY_FORMATS.join(', ')}`);
    const raw = readSecretSetting(r.url, `${at}.url`, cwd, 'URL');
    let url: URL;
    try {
      url = new URL(raw);
    } catch {
      throw new Error(`${at}.url: the value is not a URL (its length: ${raw.length})`);
    }
    if (url.protocol !== 'https:' && url.protocol !== 'http:')
      throw new Error(`${at}.url: must be an http or https URL, got ${url.protocol}`);
    receivers.set(r.name, { name: r.name, url, format: format as NotifyFormat });
  });
  const issues: { path: string; message: string }[] = [];
  const defaults = doc.defaults === undefined ? [] : readNotify(doc.defaults, 'defaults', issues);
  if (!defaults) throw new Error(`${file}: ${issues.map((i) => `${i.path}: ${i.message}`).join('; ')}`);
  for (const [i, rule] of defaults.entries())
    if (!receivers.has(rule.to))
      throw new Error(
        `${file}: defaults[${i}].to: no receiver "${rule.to}" (receivers: ${[...receivers.keys()].join(', ')})`,
      );
  return { receivers, defaults };
}
