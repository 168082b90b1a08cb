/**
 * Every string of an API request checked before its handler runs: no NUL (Postgres text cannot
 * hold it), no lone surrogate (it has no UTF-8 form, and Postgres refuses it), and no longer than
 * its limit. It walks the request's schema, so a field added to a proto is checked without being
 * listed here. The fields whose limit is in bytes (a DAG source, a run conf, an event's payload) are
 * measured by their handlers, which say more about them.
 */
import { ScalarType, type DescMessage } from '@bufbuild/protobuf';
import { Code, ConnectError, type ContextValues, type Interceptor } from '@connectrpc/connect';
import { unstorable } from '../../core/check-text.js';
import { AgentService } from '../../gen/leoflow/v1/agent_pb.js';
import { throwIfMalformed } from './malformed-body.js';

/** Measured by their handlers, in bytes. */
const SIZED_BY_HANDLER = new Set(['source', 'conf_json', 'payload_json']);

/** The longest an id (a field named `*_id`, `run_key` or `filename`) and any other string may be. */
export interface StringLimits {
  idChars: number;
  stringChars: number;
  /** A value as an error message quotes it (cut short). */
  echo(value: string): string;
}

function limitOf(name: string, limits: StringLimits): number {
  return name.endsWith('_id') || name === 'run_key' || name === 'filename' ? limits.idChars : limits.stringChars;
}

function invalid(message: string): ConnectError {
  return new ConnectError(message, Code.InvalidArgument);
}

/** One string of a request: `path` names it in the error, `name` chooses its limit. */
export function checkRequestString(path: string, name: string, s: string, limits: StringLimits): void {
  const bad = unstorable(s);
  if (bad) throw invalid(`${path}: ${bad}, got ${limits.echo(s)}`);
  const max = limitOf(name, limits);
  if (!SIZED_BY_HANDLER.has(name) && s.length > max)
    throw invalid(`${path}: must be at most ${max} characters, got ${s.length}: ${limits.echo(s)}`);
}

/** Every string field of `msg`, nested messages, lists and maps included. */
export function checkRequestMessage(
  desc: DescMessage,
  msg: Record<string, unknown>,
  limits: StringLimits,
  prefix = '',
): void {
  for (const f of desc.fields) {
    const holder = f.oneof ? (msg[f.oneof.localName] as { case?: string; value?: unknown } | undefined) : undefined;
    if (f.oneof && holder?.case !== f.localName) continue;
    const value = f.oneof ? holder?.value : msg[f.localName];
    const path = `${prefix}${f.name}`;
    switch (f.fieldKind) {
      case 'scalar':
        if (f.scalar === ScalarType.STRING && typeof value === 'string')
          checkRequestString(path, f.name, value, limits);
        break;
      case 'enum':
        break;
      case 'message':
        if (value && typeof value === 'object')
          checkRequestMessage(f.message, value as Record<string, unknown>, limits, `${path}.`);
        break;
      case 'list':
        (value as unknown[]).forEach((v, i) => {
          if (f.listKind === 'scalar' && f.scalar === ScalarType.STRING)
            checkRequestString(`${path}[${i}]`, f.name, v as string, limits);
          if (f.listKind === 'message')
            checkRequestMessage(f.message, v as Record<string, unknown>, limits, `${path}[${i}].`);
        });
        break;
      case 'map':
        for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
          checkRequestString(`${path} key`, f.name, k, limits);
          if (f.mapKind === 'scalar' && typeof v === 'string')
            checkRequestString(`${path}[${JSON.stringify(k.slice(0, 40))}]`, f.name, v, limits);
          if (f.mapKind === 'message') checkRequestMessage(f.message, v as Record<string, unknown>, limits, `${path}.`);
        }
        break;
    }
  }
}

async function* checkedStream(
  desc: DescMessage,
  messages: AsyncIterable<Record<string, unknown>>,
  values: ContextValues,
  limits: StringLimits,
): AsyncIterable<Record<string, unknown>> {
  for await (const m of messages) {
    throwIfMalformed(values);
    checkRequestMessage(desc, m, limits);
    yield m;
  }
}

/**
 * The interceptor of the Workflow and Cluster services: a body that did not decode, or a string
 * that breaks its rule, is refused with INVALID_ARGUMENT naming the field and the limit.
 */
export function checkRequestFields(limits: StringLimits): Interceptor {
  return (next) => async (req) => {
    // An agent's messages have their own rules (validate-agent-message.ts).
    if (req.service.typeName === AgentService.typeName) return next(req);
    if (!req.stream) {
      throwIfMalformed(req.contextValues);
      checkRequestMessage(req.method.input, req.message as unknown as Record<string, unknown>, limits);
      return next(req);
    }
    return next({
      ...req,
      message: checkedStream(
        req.method.input,
        req.message as AsyncIterable<Record<string, unknown>>,
        req.contextValues,
        limits,
      ) as typeof req.message,
    });
  };
}
