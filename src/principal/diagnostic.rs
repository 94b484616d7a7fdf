//! Who a failure belongs to ([`Attribution`]), the structured record of a failure the
//! scheduler kept going past ([`Diagnostic`]), and the [`DiagnosticSink`] a host may have every
//! one of them sent to as it happens.

use std::fmt;
use std::sync::Arc;

use super::capability::CapabilityId;
use super::identity::{DomainId, Generation};
use super::phase::Phase;

/// Who was running: the domain (its name and id), its generation and the context, if there was
/// one.
///
/// `Display` gives `domain 'game' (domain#3, generation 1, context 'ui')`; the name leads
/// because that is what a user wrote, the id tells two domains of one name apart.
///
/// ```
/// use skein::{DomainSpec, Plan, Pool, ScriptDomain};
/// let plan = Plan::new().function("observe", |lua, _| {
///     skein::capability::require_capability("input.observe")?;
///     lua.pack_multi(())
/// });
/// let pool = Pool::new(1);
/// let domain = ScriptDomain::new(&pool, DomainSpec::new("game").plan(plan))?;
/// let err = domain.eval("observe()").unwrap_err().to_string();
/// let who = format!("domain 'game' ({}, generation 1)", domain.id());
/// assert!(err.contains(&format!("capability 'input.observe' denied to {who}")), "{err}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attribution {
    /// The domain's name (empty for work of no named domain: then only the id is shown).
    pub domain_name: String,
    /// The domain.
    pub domain: DomainId,
    /// Its generation.
    pub generation: Generation,
    /// The context whose handler was running, if any.
    pub context: Option<String>,
    /// The actor (a `@skein/worker` thread) whose code was running, if any.
    pub actor: Option<String>,
}

impl fmt::Display for Attribution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.domain_name.is_empty() {
            write!(f, "{} (generation {}", self.domain, self.generation.get())?;
        } else {
            write!(
                f,
                "domain '{}' ({}, generation {}",
                self.domain_name,
                self.domain,
                self.generation.get()
            )?;
        }
        if let Some(context) = &self.context {
            write!(f, ", context '{context}'")?;
        }
        if let Some(actor) = &self.actor {
            write!(f, ", worker '{actor}'")?;
        }
        f.write_str(")")
    }
}

/// What a [`Diagnostic`] is about, so a sink can sort them without reading messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DiagnosticKind {
    /// A handler (of a phase, a raw event or a named event) raised or ran past its budget.
    HandlerFailed,
    /// `events.emit` was refused: the event queue was full.
    QueueFull,
    /// A route's copy of a named event did not reach the other domain (it was stopped or full).
    RouteUndelivered,
    /// Code asked for a capability its authority does not hold.
    CapabilityDenied,
    /// Two registered jobs of one phase write the same name and nothing orders them
    /// (`after`, `before`, or a chain of reads and writes): which runs first is only their
    /// registration order. Reported once per pair, as a warning.
    UnorderedWrites,
}

impl DiagnosticKind {
    /// A short lowercase name: `handler failed`, `queue full`, `route undelivered`,
    /// `capability denied`, `unordered writes`.
    pub fn name(self) -> &'static str {
        match self {
            DiagnosticKind::HandlerFailed => "handler failed",
            DiagnosticKind::QueueFull => "queue full",
            DiagnosticKind::RouteUndelivered => "route undelivered",
            DiagnosticKind::CapabilityDenied => "capability denied",
            DiagnosticKind::UnorderedWrites => "unordered writes",
        }
    }
}

/// A failure the domain went on past: a handler that raised or ran out of budget, a refused
/// emit, an undelivered route copy.
///
/// `Display` gives `<attribution> <phase> handler failed: <message>`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Diagnostic {
    /// What it is about.
    pub kind: DiagnosticKind,
    /// Who was running.
    pub attribution: Attribution,
    /// The phase it ran in, when the failure came from a phase handler.
    pub phase: Option<Phase>,
    /// The named event being delivered or emitted, when there was one.
    pub event: Option<String>,
    /// For a [`DiagnosticKind::CapabilityDenied`]: the capability that was not granted.
    pub capability: Option<CapabilityId>,
    /// Where in the scripts it comes from, `chunk:line`, when the runtime knows: where a failed
    /// handler was defined, where a refused `emit` was called.
    pub source: Option<String>,
    /// What happened, with the Luau stack when there is one.
    pub message: String,
}

impl Diagnostic {
    /// A diagnostic of `kind` with no phase, event, capability or source (set them after).
    pub fn new(kind: DiagnosticKind, attribution: Attribution, message: String) -> Diagnostic {
        Diagnostic {
            kind,
            attribution,
            phase: None,
            event: None,
            capability: None,
            source: None,
            message,
        }
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.phase {
            Some(phase) => write!(
                f,
                "{}: {phase} handler failed: {}",
                self.attribution, self.message
            ),
            None => write!(f, "{}: {}", self.attribution, self.message),
        }
    }
}

/// How much a [`Diagnostic`] sent to a [`DiagnosticSink`] matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// The domain did what was asked, but not all of it: a route's copy that was not delivered.
    Warning,
    /// Something failed: a handler raised or ran past its budget, an `events.emit` was refused.
    Error,
}

/// Where `function` was defined, `chunk:line`, for a diagnostic's `source` (a Rust function has
/// none).
pub(crate) fn defined_at(function: &mlua::Function) -> Option<String> {
    let info = function.info();
    let chunk = info.short_src?;
    let line = info.line_defined?;
    Some(format!("{}:{line}", chunk.trim_start_matches('@')))
}

/// Receives every [`Diagnostic`] a domain makes, on its engine thread: each failed handler
/// (phases, raw and named events, the `shutdown` phase of a stop) as it fails; each refused
/// `events.emit` and each undelivered route copy at the next event drain, with the report that
/// carries it. Each denied capability check is sent too, as it happens and on the thread that
/// asked (an engine thread, a pool worker, a `@skein/worker` thread): severity
/// [`Error`](Severity::Error), kind [`DiagnosticKind::CapabilityDenied`], the capability in
/// [`Diagnostic::capability`]. The same diagnostics still reach the reports
/// ([`PhaseReport::errors`](crate::frame::PhaseReport::errors),
/// [`EventReport`](crate::event::EventReport)); a sink sees them all in one place, in order.
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use skein::diagnostic::{Diagnostic, DiagnosticSink, Severity};
/// use skein::{ContextSpec, DomainSpec, Phase, Pool, ScriptDomain};
///
/// #[derive(Default)]
/// struct Seen(Mutex<Vec<String>>);
/// impl DiagnosticSink for Seen {
///     fn diagnostic(&self, severity: Severity, d: &Diagnostic) {
///         self.0.lock().unwrap().push(format!("{severity:?} {}", d.message));
///     }
/// }
///
/// let seen = Arc::new(Seen::default());
/// let pool = Pool::new(1);
/// let spec = DomainSpec::new("game")
///     .context(ContextSpec::new("ui").phases([Phase::Update]))?
///     .diagnostics(seen.clone());
/// let domain = ScriptDomain::new(&pool, spec)?;
/// domain.exec(r#"require("@skein/context").bind("ui", { update = function() error("oops", 0) end })"#)?;
/// domain.run_phase(Phase::Update, &[])?;
/// let seen = seen.0.lock().unwrap();
/// assert_eq!(seen.len(), 1);
/// assert!(seen[0].starts_with("Error ") && seen[0].contains("oops"), "{seen:?}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait DiagnosticSink: Send + Sync {
    /// Takes one diagnostic; must not call back into the domain.
    fn diagnostic(&self, severity: Severity, d: &Diagnostic);
}

/// A domain's sink, if it has one.
pub(crate) type Diagnostics = Option<Arc<dyn DiagnosticSink>>;

/// A [`Diagnostics`] that a `#[derive(Debug, Clone)]` spec can hold.
#[derive(Clone, Default)]
pub(crate) struct DiagnosticSlot(pub(crate) Diagnostics);

impl fmt::Debug for DiagnosticSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "Some(<DiagnosticSink>)"
        } else {
            "None"
        })
    }
}
