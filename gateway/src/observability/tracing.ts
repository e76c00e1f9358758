/**
 * The tracing seam. Nothing here loads OpenTelemetry: the SDK is imported only when an OTLP
 * endpoint is configured, so a gateway without tracing pays for none of it.
 */
export interface TraceSpan {
  child(name: string, attrs?: Record<string, string | number | boolean>): TraceSpan;
  set(attrs: Record<string, string | number | boolean>): void;
  fail(message: string): void;
  end(): void;
  /**
   * A finished child measured elsewhere (by the runner): it began `startMs` after this span
   * and lasted `durationMs`.
   */
  record(
    name: string,
    startMs: number,
    durationMs: number,
    attrs: Record<string, string | number | boolean>,
    error?: string,
  ): void;
  /** The W3C traceparent naming this span, for the next hop (the runner). */
  traceparent(): string;
}

export interface Tracer {
  /** A root span for one call, the child of the client's span when it sent a valid traceparent. */
  start(name: string, traceparent: string | undefined, attrs: Record<string, string | number | boolean>): TraceSpan;
  flush(): Promise<void>;
  close(): Promise<void>;
}

export interface TracingConfig {
  otlpEndpoint: string;
  serviceName: string;
}

export async function startTracing(config: TracingConfig): Promise<Tracer | undefined> {
  if (!config.otlpEndpoint) return undefined;
  const { otlpTracer } = await import('./otel');
  return otlpTracer(config);
}
