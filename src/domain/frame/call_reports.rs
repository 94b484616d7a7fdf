//! What the host's calls into a domain's frame answer: one phase's handler calls
//! ([`PhaseReport`], [`HandlerTiming`]), an advance ([`AdvanceReport`]), a drain of the event
//! queue ([`EventReport`]) and the calls a frame's budget left waiting ([`StillWaiting`]).
//! Plain values: the frame driver, the bindings and the event handlers fill them.

use std::sync::Arc;
use std::time::Duration;

use crate::domain::frame::engine_services::FrameReport;
use crate::domain::Report;
use crate::principal::diagnostic::Diagnostic;
use crate::principal::Phase;

/// What one [`run_phase`](crate::ScriptDomain::run_phase) did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PhaseReport {
    /// The phase that ran.
    pub phase: Phase,
    /// How many handlers it called.
    pub calls: usize,
    /// Each call's context and wall time (to its return or first yield), in call order.
    pub timings: Vec<HandlerTiming>,
    /// The handlers that failed (raised, or ran past their context's budget), in call order.
    pub errors: Vec<Diagnostic>,
    /// How long the whole phase took, wall time, its join included.
    pub elapsed: Duration,
    /// How long the phase waited, after its last handler returned or yielded, for the pool
    /// work its handlers await (its join; zero when no handler awaited the pool).
    pub joined: Duration,
    /// The calls that still waited on pool work when the frame's budget ran out (see
    /// [`advance`](crate::ScriptDomain::advance)): they go on in a later frame.
    pub still_waiting: Vec<StillWaiting>,
}

/// How long one handler call took.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HandlerTiming {
    /// The handler's context.
    pub context: Arc<str>,
    /// From the call to its return, failure or first yield.
    pub elapsed: Duration,
}

/// What one [`advance`](crate::ScriptDomain::advance) did.
#[derive(Clone, Debug, PartialEq)]
pub struct AdvanceReport {
    /// How many `fixedUpdate` steps ran.
    pub fixed_steps: u32,
    /// How many owed steps were dropped because they passed the catch-up limit.
    pub dropped_steps: u64,
    /// Every phase run, in order: `startup` on the generation's first frame, the fixed steps,
    /// then `update`, then `lateUpdate`.
    pub phases: Vec<PhaseReport>,
    /// The event drain that followed `lateUpdate` (see
    /// [`drain_events`](crate::ScriptDomain::drain_events)).
    pub events: EventReport,
    /// The engine frame that ended the advance.
    pub frame: FrameReport,
    /// How long the advance took, wall time.
    pub elapsed: Duration,
    /// The reports made during the whole advance, its phases and its frame, oldest first:
    /// copies of what waits in [`take_reports`](crate::ScriptDomain::take_reports), as
    /// [`FrameReport::reports`] (which holds the frame's part) says.
    pub reports: Vec<Report>,
}

impl AdvanceReport {
    /// Every handler failure of the advance, in the order they happened.
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.phases.iter().flat_map(|p| p.errors.iter())
    }

    /// How long the advance's phases waited for their handlers' pool work, in all.
    pub fn joined(&self) -> Duration {
        self.phases.iter().map(|p| p.joined).sum()
    }

    /// Every handler call the advance joined that still waited on pool work when its frame
    /// budget ran out, in call order: each goes on in a later frame.
    pub fn still_waiting(&self) -> impl Iterator<Item = &StillWaiting> {
        self.phases.iter().flat_map(|p| p.still_waiting.iter())
    }
}

/// A handler call that still waited on pool work when its frame's budget ran out: it goes on
/// in a later frame, resumed when its work settles.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StillWaiting {
    /// Which handler: `context 'game' update handler`.
    pub source: String,
    /// How long it had waited on the pool when the frame went on without it, from its call.
    pub waited: Duration,
}

/// What one drain of the event queue did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventReport {
    /// Events that reached at least one handler.
    pub delivered: usize,
    /// Events nothing handled: counted here and dropped.
    pub unhandled: usize,
    /// Events still waiting after the drain (queued during it, or past `per_drain`).
    pub pending: usize,
    /// Handlers that failed during the drain, and the named events `emit` refused since the
    /// last drain (`queue full`), in the order they happened within each.
    pub errors: Vec<Diagnostic>,
    /// Copies a route could not deliver since the last drain (the recipient was stopped or
    /// full): the emitter's domain is told, the emitter is not failed.
    pub warnings: Vec<Diagnostic>,
}
