/**
 * The tracing seam. Nothing here loads OpenTelemetry: the SDK is imported only when an OTLP
 * endpoint is configured, so a gateway without tracing pays for none of it.
 */
import type { Tracer, TracingConfig } from './tracer';

export type { TraceSpan, Tracer, TracingConfig } from './tracer';

export async function startTracing(config: TracingConfig): Promise<Tracer | undefined> {
  if (!config.otlpEndpoint) return undefined;
  const { otlpTracer } = await import('./otel');
  return otlpTracer(config);
}
