import { startOtlpReceiver, type OtlpReceiver } from '../helpers/otlp-receiver.js';

/**
 * Tracing on or off for a benchmark's server, by LEOFLOW_BENCH_OTLP=1: on, spans go to an OTLP
 * receiver in the bench process (decoding them, as a collector would), so chain-40 and throughput
 * can be run with the exporter on and off, alternating, for the A/B in BENCHMARKS.md.
 */
export async function benchTracing(): Promise<{
  on: boolean;
  args: string[];
  spans(): number;
  close(): Promise<void>;
}> {
  if (process.env.LEOFLOW_BENCH_OTLP !== '1') return { on: false, args: [], spans: () => 0, close: async () => {} };
  const receiver: OtlpReceiver = await startOtlpReceiver();
  return {
    on: true,
    args: ['--otlp-endpoint', receiver.url],
    spans: () => receiver.spans.length,
    close: () => receiver.close(),
  };
}
