import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import protobuf from 'protobufjs';

/** A span as the receiver decoded it: ids in hex, attributes flattened to plain values. */
export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  kind: number;
  startNs: bigint;
  endNs: bigint;
  attributes: Record<string, string | number | boolean>;
  events: { name: string }[];
  status: { code: number; message: string };
  traceState: string;
  resource: Record<string, string | number | boolean>;
}

export interface OtlpReceiver {
  /** The collector's base URL (`http://127.0.0.1:PORT`). */
  url: string;
  spans: ReceivedSpan[];
  /** Requests that were not OTLP protobuf on /v1/traces. */
  rejected: string[];
  close(): Promise<void>;
}

const PROTO_ROOT = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'vendor', 'opentelemetry-proto');

/**
 * An OTLP/HTTP collector for tests: POST /v1/traces with `application/x-protobuf`, decoded with
 * the OpenTelemetry protos themselves (vendor/opentelemetry-proto), answered as a collector answers.
 */
export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const root = new protobuf.Root();
  root.resolvePath = (_origin, target) => path.join(PROTO_ROOT, target);
  await root.load('opentelemetry/proto/collector/trace/v1/trace_service.proto', { keepCase: false });
  const Request = root.lookupType('opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest');
  const Response = root.lookupType('opentelemetry.proto.collector.trace.v1.ExportTraceServiceResponse');
  const spans: ReceivedSpan[] = [];
  const rejected: string[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (
        req.method !== 'POST' ||
        req.url !== '/v1/traces' ||
        req.headers['content-type'] !== 'application/x-protobuf'
      ) {
        rejected.push(`${req.method} ${req.url} ${req.headers['content-type']}`);
        res.writeHead(404).end();
        return;
      }
      const msg = Request.toObject(Request.decode(Buffer.concat(chunks)), {
        longs: String,
        bytes: Buffer,
        defaults: true,
      }) as Decoded;
      for (const rs of msg.resourceSpans) {
        const resource = flatten(rs.resource?.attributes ?? []);
        for (const ss of rs.scopeSpans) for (const s of ss.spans) spans.push(toSpan(s, resource));
      }
      res
        .writeHead(200, { 'content-type': 'application/x-protobuf' })
        .end(Buffer.from(Response.encode(Response.create({})).finish()));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    spans,
    rejected,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

type AnyValue = { stringValue?: string; intValue?: string; boolValue?: boolean; doubleValue?: number };
type KeyValue = { key: string; value?: AnyValue };
type DecodedSpan = {
  traceId: Buffer;
  spanId: Buffer;
  parentSpanId: Buffer;
  name: string;
  kind: number;
  startTimeUnixNano: string;
  endTimeUnixNano: string;
  attributes: KeyValue[];
  events: { name: string }[];
  status?: { code: number; message: string };
  traceState: string;
};
type Decoded = { resourceSpans: { resource?: { attributes: KeyValue[] }; scopeSpans: { spans: DecodedSpan[] }[] }[] };

function flatten(kvs: KeyValue[]): Record<string, string | number | boolean> {
  const out: Record<string, string | number | boolean> = {};
  for (const { key, value } of kvs) {
    if (!value) continue;
    if (value.stringValue !== undefined && value.stringValue !== '') out[key] = value.stringValue;
    else if (value.intValue !== undefined && value.intValue !== '0') out[key] = Number(value.intValue);
    else if (value.boolValue) out[key] = true;
    else if (value.doubleValue) out[key] = value.doubleValue;
    else out[key] = value.stringValue ?? Number(value.intValue ?? 0);
  }
  return out;
}

function toSpan(s: DecodedSpan, resource: Record<string, string | number | boolean>): ReceivedSpan {
  return {
    traceId: s.traceId.toString('hex'),
    spanId: s.spanId.toString('hex'),
    parentSpanId: s.parentSpanId.toString('hex'),
    name: s.name,
    kind: s.kind,
    startNs: BigInt(s.startTimeUnixNano),
    endNs: BigInt(s.endTimeUnixNano),
    attributes: flatten(s.attributes),
    events: s.events.map((e) => ({ name: e.name })),
    status: { code: s.status?.code ?? 0, message: s.status?.message ?? '' },
    traceState: s.traceState,
    resource,
  };
}
