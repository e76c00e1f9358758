import {
  ROOT_CONTEXT,
  SpanStatusCode,
  defaultTextMapGetter,
  defaultTextMapSetter,
  trace,
  type Span,
} from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, BatchSpanProcessor } from '@opentelemetry/sdk-trace-base';
import type { TraceSpan, Tracer, TracingConfig } from './tracer';

/** Spans exported over OTLP/HTTP. Nothing is registered globally: each gateway owns its provider. */
export function otlpTracer(config: TracingConfig): Tracer {
  const provider = new BasicTracerProvider({
    resource: resourceFromAttributes({ 'service.name': config.serviceName }),
    spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter({ url: config.otlpEndpoint }))],
  });
  const tracer = provider.getTracer('tether-gateway');
  const propagator = new W3CTraceContextPropagator();

  const wrap = (span: Span, startedAt = performance.timeOrigin + performance.now()): TraceSpan => ({
    child: (name, attrs) => wrap(tracer.startSpan(name, { attributes: attrs }, trace.setSpan(ROOT_CONTEXT, span))),
    record: (name, startMs, durationMs, attrs, error) => {
      const startTime = startedAt + startMs;
      const child = tracer.startSpan(name, { attributes: attrs, startTime }, trace.setSpan(ROOT_CONTEXT, span));
      if (error !== undefined) child.setStatus({ code: SpanStatusCode.ERROR, message: error });
      child.end(startTime + durationMs);
    },
    set: (attrs) => void span.setAttributes(attrs),
    fail: (message) => void span.setStatus({ code: SpanStatusCode.ERROR, message }),
    end: () => span.end(),
    traceparent: () => {
      const carrier: Record<string, string> = {};
      propagator.inject(trace.setSpan(ROOT_CONTEXT, span), carrier, defaultTextMapSetter);
      return carrier.traceparent ?? '';
    },
  });

  return {
    start(name, traceparent, attrs) {
      const parent = traceparent
        ? propagator.extract(ROOT_CONTEXT, { traceparent }, defaultTextMapGetter)
        : ROOT_CONTEXT;
      return wrap(tracer.startSpan(name, { attributes: attrs }, parent));
    },
    flush: () => provider.forceFlush(),
    close: () => provider.shutdown(),
  };
}
