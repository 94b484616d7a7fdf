//! [`TracingSink`] (cargo feature `tracing`): a domain's logs, diagnostics and profile events as
//! `tracing` events, for a host whose own telemetry already goes through a `tracing` subscriber.
//! This module only translates; where the events go is the subscriber's business.

use crate::principal::diagnostic::{Diagnostic, DiagnosticSink, Severity};
use crate::principal::profile::{ProfileEvent, ProfileSink};
use crate::principal::{LogLevel, LogRecord, LogSink};

/// Sends what a domain reports to the `tracing` subscriber of the thread it arrives on, under the
/// target `skein`: `@skein/log` records at their own level, diagnostics at `WARN` or `ERROR`, and
/// profile events at `TRACE`. Set one sink for all three streams.
///
/// ```
/// use std::sync::Arc;
/// use skein::log::TracingSink;
/// use skein::DomainSpec;
/// let sink = Arc::new(TracingSink);
/// let spec = DomainSpec::new("game").logs(sink.clone()).diagnostics(sink.clone()).profile(sink);
/// assert!(spec.has_profile());
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct TracingSink;

impl LogSink for TracingSink {
    fn record(&self, r: &LogRecord) {
        let (domain, generation) = (r.attribution.domain.get(), r.attribution.generation.get());
        let chunk = r.target.as_str();
        let source = r.source.as_deref().unwrap_or("");
        let fields = format!("{:?}", r.fields);
        let message = r.message.as_str();
        // The level of a `tracing` event is fixed per call site: one site per level.
        match r.level {
            LogLevel::Debug => {
                tracing::debug!(target: "skein", domain, generation, chunk, source, fields, "{message}")
            }
            LogLevel::Info => {
                tracing::info!(target: "skein", domain, generation, chunk, source, fields, "{message}")
            }
            LogLevel::Warn => {
                tracing::warn!(target: "skein", domain, generation, chunk, source, fields, "{message}")
            }
            LogLevel::Error => {
                tracing::error!(target: "skein", domain, generation, chunk, source, fields, "{message}")
            }
        }
    }
}

impl DiagnosticSink for TracingSink {
    fn diagnostic(&self, severity: Severity, d: &Diagnostic) {
        let (domain, generation) = (d.attribution.domain.get(), d.attribution.generation.get());
        let context = d.attribution.context.as_deref().unwrap_or("");
        let phase = d.phase.map_or("", |p| p.name());
        let kind = d.kind.name();
        let event = d.event.as_deref().unwrap_or("");
        let capability = d.capability.as_ref().map_or("", |c| c.as_str());
        let source = d.source.as_deref().unwrap_or("");
        let message = d.message.as_str();
        match severity {
            Severity::Warning => tracing::warn!(
                target: "skein", domain, generation, context, phase, kind, event, capability,
                source, "{message}"
            ),
            Severity::Error => tracing::error!(
                target: "skein", domain, generation, context, phase, kind, event, capability,
                source, "{message}"
            ),
        }
    }
}

impl ProfileSink for TracingSink {
    fn event(&self, e: &ProfileEvent) {
        tracing::trace!(
            target: "skein",
            domain = e.attribution.domain.get(),
            generation = e.attribution.generation.get(),
            kind = ?e.kind,
            start_us = e.start,
            duration_us = e.duration.as_micros() as u64,
            queue_delay_us = e.queue_delay.map(|d| d.as_micros() as u64),
            thread = e.thread.id,
            "{}",
            e.name
        );
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Level, Metadata, Subscriber};

    use super::*;
    use crate::principal::{Attribution, DiagnosticKind, DomainId, Generation};
    use crate::value::Message;

    /// Keeps each event's level, target and fields as text.
    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<(Level, String, String)>>>);

    struct Fields(String);

    impl Visit for Fields {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            self.0.push_str(&format!("{}={:?} ", field.name(), value));
        }
    }

    impl Subscriber for Capture {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, event: &Event<'_>) {
            let mut fields = Fields(String::new());
            event.record(&mut fields);
            let meta = event.metadata();
            let row = (*meta.level(), meta.target().to_owned(), fields.0);
            self.0.lock().unwrap().push(row);
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }

    #[test]
    fn records_and_diagnostics_become_events_at_their_level() {
        let capture = Capture::default();
        let attribution = Attribution {
            domain_name: "game".into(),
            domain: DomainId(4),
            generation: Generation(1),
            context: Some("ui".into()),
            actor: None,
        };
        tracing::subscriber::with_default(capture.clone(), || {
            TracingSink.record(&LogRecord {
                attribution: attribution.clone(),
                level: LogLevel::Warn,
                target: "main.luau".into(),
                message: "low on fuel".into(),
                fields: Message::Nil,
                source: Some("main.luau:3".into()),
                printed: None,
            });
            TracingSink.diagnostic(
                Severity::Error,
                &Diagnostic::new(DiagnosticKind::HandlerFailed, attribution, "boom".into()),
            );
        });
        let got = capture.0.lock().unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].0, got[0].1.as_str()), (Level::WARN, "skein"));
        assert!(got[0].2.contains("message=low on fuel"), "{}", got[0].2);
        assert!(got[0].2.contains("domain=4"), "{}", got[0].2);
        assert!(got[0].2.contains("source=\"main.luau:3\""), "{}", got[0].2);
        assert_eq!(got[1].0, Level::ERROR);
        assert!(got[1].2.contains("context=\"ui\""), "{}", got[1].2);
    }
}
