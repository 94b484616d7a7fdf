//! Driving a domain as a host's frame loop does:
//! [`ScriptDomain::run_frames`](crate::ScriptDomain::run_frames) advances it at a fixed step
//! while anything can still run, serves its mailbox between frames, and ends it by the same
//! rules as [`run_until_idle`](crate::ScriptDomain::run_until_idle): idle (nothing left), or
//! stalled (nothing can ever move again, under
//! [`DomainSpec::detect_stalls`](crate::DomainSpec::detect_stalls)).
//!
//! The loop itself is the facade's (it coordinates every part); this file holds its steps over
//! the parts they need: serving the current generation between frames ([`serve_until`]),
//! whether anything can still run ([`frames_live`]), and the handler failures of a frame kept
//! as reports ([`keep_handler_failures`]). What a frame does is `advance`'s (`frame/`), and the
//! stall verdict is `stall_watch.rs`'s, with one more thing the engine thread knows here:
//! events still queued, which the next frame's drain hands to their handlers.
//!
//! Its invariants: between two frames no frame is counted and the clock does not move; the
//! wait for the next frame never passes its tick, however much arrives, and ends at once when
//! the domain is interrupted.

use std::time::Instant;

use crate::domain::events::handlers::EventHandlers;
use crate::domain::frame::phases::phase_failure;
use crate::domain::generation::GenerationState;
use crate::domain::interrupt::InterruptTarget;
use crate::domain::reports::Reports;
use crate::domain::{AdvanceReport, Report, ReportKind};
use crate::executor::wake_queue::Waited;
use crate::principal::diagnostic::DiagnosticKind;

/// Keeps the handler failures of `frame` in `reports`, for a frame loop that reads no frame's
/// report (`run_frames`, `skein serve`'s): a phase handler's labelled by its context and phase,
/// an event handler's by the event.
pub(crate) fn keep_handler_failures(frame: &AdvanceReport, reports: &mut Reports) {
    for phase in &frame.phases {
        for error in &phase.errors {
            let context = error.attribution.context.as_deref();
            reports.push(phase_failure(phase.phase, context, error.message.clone()));
        }
    }
    for error in &frame.events.errors {
        let source = match &error.event {
            Some(name) => format!("event '{name}'"),
            None => "events".to_owned(),
        };
        // A refused emit raised in the code that emitted: a note, whether or not it was
        // caught (uncaught, it failed that code, which is reported on its own).
        let kind = match error.kind {
            DiagnosticKind::QueueFull => ReportKind::Note,
            _ => ReportKind::Handler,
        };
        reports.push(Report::new(kind, source, error.message.clone()));
    }
}

/// Between two frames: until `tick`, whatever arrives in `current`'s mailbox is handled at once
/// (`drain`) and the tasks it readies run (no frame is counted, and the clock does not move).
/// Returns early once `interrupt` is requested.
pub(crate) fn serve_until(
    current: &GenerationState,
    interrupt: &InterruptTarget,
    tick: Instant,
    mut drain: impl FnMut() -> bool,
) {
    loop {
        // A stream of messages does not hold the next frame back.
        if interrupt.requested() || Instant::now() >= tick {
            return;
        }
        if current.rx.wait_until(Some(tick)) == Waited::TimedOut {
            return;
        }
        drain();
        while current.vm.step() {
            if Instant::now() >= tick {
                return;
            }
        }
    }
}

/// Whether anything can still run: a task of `current`'s engine VM, a pending promise, a live
/// registered job, or an event still queued in `events`.
pub(crate) fn frames_live(current: &GenerationState, events: &EventHandlers) -> bool {
    current.vm.tasks() > 0
        || current.vm.core.promises.borrow().pending() > 0
        || current.registry.has_work()
        || events.queue().pending().0 > 0
}
