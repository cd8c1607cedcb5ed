//! Traces: one OpenTelemetry trace per job, exported over OTLP (HTTP, protobuf) when the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, its service named by
//! `OTEL_SERVICE_NAME` (default `mediagate`). Unset, no subscriber wants the job's spans, and each costs a
//! branch.
//!
//! A job outlives the request that submitted it: it is polled, settled, copied and delivered later, by other
//! tasks of this process or by another replica. So its trace is not one span's life: the submit span's
//! context is kept on the task as a W3C `traceparent`, and every later step opens a span under it.

use opentelemetry::trace::{SpanContext, TraceContextExt, TraceFlags, TraceId, TraceState, TracerProvider as _};
use opentelemetry::{Context, SpanId};
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The target of every job span; the log's filter leaves it out.
pub const TARGET: &str = "mediagate::trace";
/// The longest one export may take (the OTLP exporters' default timeout).
const EXPORT_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

/// The exporter, kept to flush what is buffered when the process stops.
pub struct Exporting(SdkTracerProvider);

impl Exporting {
    /// Sends the spans still buffered (a stopping process's last ones).
    pub fn shutdown(self) {
        if let Err(e) = self.0.shutdown() {
            eprintln!("traces: {e}");
        }
    }
}

/// The tracing layer that exports spans.
pub type Layer<S> = tracing_opentelemetry::OpenTelemetryLayer<S, opentelemetry_sdk::trace::Tracer>;

/// The layer that exports job spans, and its exporter, if the environment asks for traces.
pub fn layer<S>() -> Result<Option<(Layer<S>, Exporting)>, String>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    let asked = ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"]
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()));
    let Some(endpoint) = asked else { return Ok(None) };
    use opentelemetry_otlp::WithHttpConfig;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(Agent(super::tls::http_agent(&endpoint, None, Some(EXPORT_WITHIN))?))
        .build()
        .map_err(|e| format!("traces: {e}"))?;
    let service = std::env::var("OTEL_SERVICE_NAME").ok().filter(|v| !v.trim().is_empty());
    let resource =
        opentelemetry_sdk::Resource::builder().with_service_name(service.unwrap_or_else(|| "mediagate".into())).build();
    let provider = SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource).build();
    let tracer = provider.tracer("mediagate");
    Ok(Some((tracing_opentelemetry::layer().with_tracer(tracer), Exporting(provider))))
}

/// A span of one of a job's steps: under the job's trace (`traceparent`, as kept on its task), else under
/// the current span.
pub fn step(name: &'static str, traceparent: Option<&str>) -> Span {
    let span = tracing::info_span!(target: TARGET, "step", otel.name = name);
    if let Some(parent) = traceparent.and_then(context_of) {
        let _ = span.set_parent(parent);
    }
    span
}

/// The `traceparent` of `span`, if it is traced.
pub fn traceparent(span: &Span) -> Option<String> {
    let context = span.context();
    let span_context = context.span().span_context().clone();
    span_context.is_valid().then(|| {
        format!("00-{}-{}-{:02x}", span_context.trace_id(), span_context.span_id(), span_context.trace_flags().to_u8())
    })
}

/// The trace id a `traceparent` names.
pub fn trace_id(traceparent: &str) -> Option<&str> {
    traceparent.split('-').nth(1).filter(|id| id.len() == 32)
}

fn context_of(traceparent: &str) -> Option<Context> {
    let mut parts = traceparent.split('-');
    let (_, trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let trace = TraceId::from_hex(trace).ok()?;
    let span = SpanId::from_hex(span).ok()?;
    let flags = TraceFlags::new(u8::from_str_radix(flags, 16).ok()?);
    let remote = SpanContext::new(trace, span, flags, true, TraceState::default());
    remote.is_valid().then(|| Context::new().with_remote_span_context(remote))
}

/// The exporter's HTTP client. The batch exporter calls it on its own thread, where a blocking call is fine.
#[derive(Debug)]
struct Agent(ureq::Agent);

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for Agent {
    async fn send_bytes(
        &self,
        request: http::Request<bytes::Bytes>,
    ) -> Result<http::Response<bytes::Bytes>, opentelemetry_http::HttpError> {
        let (parts, body) = request.into_parts();
        let request = http::Request::from_parts(parts, body.to_vec());
        let mut answer = self.0.run(request)?;
        let status = answer.status();
        let body = answer.body_mut().read_to_vec()?;
        Ok(http::Response::builder().status(status).body(bytes::Bytes::from(body))?)
    }
}
