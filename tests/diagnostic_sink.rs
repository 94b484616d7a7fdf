//! The diagnostic sink: every diagnostic a domain makes, with its severity, besides the reports.

use std::sync::{Arc, Mutex};

use skein::diagnostic::{Diagnostic, DiagnosticKind, DiagnosticSink, Severity};
use skein::event::EventLimits;
use skein::{ContextSpec, DomainSpec, Phase, Pool, ScriptDomain};

#[derive(Default)]
struct Seen(Mutex<Vec<(Severity, Diagnostic)>>);

impl DiagnosticSink for Seen {
    fn diagnostic(&self, severity: Severity, d: &Diagnostic) {
        self.0.lock().unwrap().push((severity, d.clone()));
    }
}

impl Seen {
    fn take(&self) -> Vec<(Severity, Diagnostic)> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

#[test]
fn phase_and_event_handler_failures_reach_the_sink_as_errors() {
    let seen = Arc::new(Seen::default());
    let pool = Pool::new(1);
    let spec = DomainSpec::new("game")
        .context(ContextSpec::new("ui").phases([Phase::Update, Phase::Event]))
        .unwrap()
        .diagnostics(seen.clone());
    let domain = ScriptDomain::new(&pool, spec).unwrap();
    domain
        .exec(
            r#"require("@skein/context").bind("ui", { update = function() error("bad update", 0) end })
            require("@skein/events").on("hit", function() error("bad hit", 0) end, "ui")
            require("@skein/events").emit("hit", 1)"#,
        )
        .unwrap();
    let report = domain.run_phase(Phase::Update, &[]).unwrap();
    let events = domain.drain_events();
    let got = seen.take();
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0].0, Severity::Error);
    assert_eq!(got[0].1, report.errors[0], "the sink and the report agree");
    assert_eq!(got[0].1.phase, Some(Phase::Update));
    assert_eq!(got[0].1.attribution.context.as_deref(), Some("ui"));
    assert_eq!(got[0].1.kind, DiagnosticKind::HandlerFailed);
    // Where the failed handler was defined: the exec chunk's first line.
    assert_eq!(got[0].1.source.as_deref(), Some("exec:1"));
    assert_eq!(got[0].1.event, None);
    assert_eq!(got[1].0, Severity::Error);
    assert_eq!(got[1].1, events.errors[0]);
    assert_eq!(got[1].1.kind, DiagnosticKind::HandlerFailed);
    assert_eq!(got[1].1.event.as_deref(), Some("hit"));
    assert_eq!(got[1].1.source.as_deref(), Some("exec:2"));
    assert_eq!(got[1].1.phase, None);
    for (_, d) in &got {
        assert_eq!(d.kind, skein::diagnostic::DiagnosticKind::HandlerFailed);
        assert_eq!(d.capability, None);
    }
    let message = &got[1].1.message;
    assert!(
        message.starts_with("event 'hit' handler failed: bad hit\n"),
        "{message}"
    );
}

#[test]
fn refused_emits_are_errors_and_undelivered_route_copies_are_warnings() {
    let seen = Arc::new(Seen::default());
    let pool = Pool::new(1);
    let limits = EventLimits {
        pending: 1,
        ..EventLimits::default()
    };
    let game = ScriptDomain::new(
        &pool,
        DomainSpec::new("game")
            .event_limits(limits)
            .diagnostics(seen.clone()),
    )
    .unwrap();
    let mut gone = ScriptDomain::new(&pool, DomainSpec::new("gone")).unwrap();
    game.route("boom", gone.mailbox()).unwrap();
    gone.stop();
    game.exec(r#"require("@skein/events").emit("boom", 1)"#)
        .unwrap();
    game.exec(r#"pcall(require("@skein/events").emit, "boom", 2)"#)
        .unwrap();
    // Both wait in the domain until its next drain, which reports them and sends them on.
    assert!(seen.take().is_empty());
    let report = game.drain_events();
    let got = seen.take();
    let kinds: Vec<Severity> = got.iter().map(|(s, _)| *s).collect();
    assert_eq!(kinds, [Severity::Error, Severity::Warning], "{got:?}");
    assert_eq!(got[0].1.kind, skein::diagnostic::DiagnosticKind::QueueFull);
    assert_eq!(
        got[1].1.kind,
        skein::diagnostic::DiagnosticKind::RouteUndelivered
    );
    assert_eq!(got[0].1, report.errors[0]);
    assert!(
        got[0].1.message.starts_with("events.emit: queue full"),
        "{got:?}"
    );
    assert_eq!(got[0].1.kind, DiagnosticKind::QueueFull);
    assert_eq!(got[0].1.event.as_deref(), Some("boom"));
    assert_eq!(got[1].1, report.warnings[0]);
    assert_eq!(got[1].1.kind, DiagnosticKind::RouteUndelivered);
    assert_eq!(got[1].1.event.as_deref(), Some("boom"));
    assert!(
        got[1].1.message.starts_with("warning: route 'boom'"),
        "{got:?}"
    );
}

#[test]
fn a_denial_reaches_the_sink_with_its_capability_and_text() {
    let seen = Arc::new(Seen::default());
    let pool = Pool::new(1);
    let plan = skein::Plan::new().function("observe", |lua, _| {
        skein::capability::require_capability("input.observe")?;
        lua.pack_multi(())
    });
    let grant =
        skein::capability::RootAuthority::new().grant(skein::capability::CapabilitySet::from_iter(
            [skein::capability::CapabilityId::new("worker.spawn").unwrap()],
        ));
    let spec = DomainSpec::new("game")
        .plan(plan)
        .grant(grant)
        .diagnostics(seen.clone());
    let domain = ScriptDomain::new(&pool, spec).unwrap();
    domain.exec("pcall(observe)").unwrap();
    domain
        .eval(
            r#"
            local w = require('@skein/worker').spawn {
                name = 'peeker', source = 'return function() return (pcall(observe)) end',
            }
            w:send(1)
            return w:receive(5)
            "#,
        )
        .unwrap();
    let seen = seen.take();
    assert_eq!(seen.len(), 2, "{seen:?}");
    let id = domain.id();
    for (who, (severity, d)) in [
        format!("domain 'game' ({id}, generation 1)"),
        format!("domain 'game' ({id}, generation 1, worker 'peeker')"),
    ]
    .iter()
    .zip(&seen)
    {
        assert_eq!(*severity, Severity::Error);
        assert_eq!(d.kind, skein::diagnostic::DiagnosticKind::CapabilityDenied);
        assert_eq!(
            d.capability.as_ref().map(|c| c.as_str()),
            Some("input.observe")
        );
        assert_eq!(d.phase, None);
        assert_eq!(
            d.message,
            format!("capability 'input.observe' denied to {who}")
        );
    }
    assert_eq!(seen[1].1.attribution.actor.as_deref(), Some("peeker"));
    // The host's denial log still has both.
    assert_eq!(domain.denials(), 2);
}
