/**
 * What the gateway asks of tracing, apart from how it is done: the OTLP implementation
 * (otel.ts) and the seam that loads it (tracing.ts) both depend on these, not on each other.
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
