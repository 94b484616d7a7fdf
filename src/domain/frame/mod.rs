//! The domain's frame, the [`FrameDriver`] part's folder: what runs on the
//! engine thread once per frame, and the parts that decide it. This file holds the frame's own
//! steps: the frame's counts and report, the follow-up drains after forwarded queries, the
//! frame counter's move, and a wave of registered jobs waiting for its pool items. The host's
//! contexts and fixed step (`context.rs`), the phase handlers scripts bind and the scheduler
//! that runs them (`phases.rs`), the join of handler calls waiting on the pool (`join.rs`), the
//! engine services a frame answers (`engine_services.rs`) and their failures
//! (`service_error.rs`), the driver itself and its scheduler
//! entry (`driver.rs`) and the labels of handler calls (`handler_label.rs`) are its files.
//!
//! Its invariants: a frame's counts (forwarded queries, applied commands) start at zero at a
//! plain frame's start or an advance's, never in between; the frame counter moves once per
//! frame, after the frame's drains and before its registered jobs; no wait here outlasts its
//! bound ([`FrameReport::FOLLOW_UP_WAIT`], [`FrameReport::WAVE_WAIT`] or the run deadline),
//! however much arrives.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use self::driver::FrameDriver;
use crate::domain::generation::GenerationState;
use crate::domain::{FrameReport, Report};
use crate::executor::wake_queue::Waited;
use crate::jobs::OutcomeSlot;
use crate::principal::diagnostic::{Attribution, Diagnostic, DiagnosticKind};
use crate::principal::Principal;

/// While a wave of registered jobs waits for its pool items, how long the engine thread parks
/// on one item before it looks at its mailbox again (an item may be waiting for the engine to
/// answer a query it forwarded): 200 µs.
const WAVE_POLL: Duration = Duration::from_micros(200);

pub(crate) mod bindings;
pub(crate) mod call_reports;
pub(crate) mod context;
pub(crate) mod driver;
pub(crate) mod engine_services;
pub(crate) mod handler_label;
pub(crate) mod join;
pub(crate) mod phases;
pub(crate) mod service_error;

impl FrameDriver {
    /// Starts the counts and time of a frame: `dt` is added to the frame time, and, when
    /// `early_drain` (a plain [`frame`](crate::ScriptDomain::frame), which counts its forwarded
    /// queries and applied commands from its own start), the counts start again; an
    /// [`advance`](crate::ScriptDomain::advance) started them at its own start, its joins
    /// included.
    pub(crate) fn begin_frame(&self, dt: Duration, early_drain: bool) {
        if early_drain {
            // An advance counts from its own start, its joins included.
            self.services.forwarded.set(0);
            self.services.applied.set(0);
        }
        self.frame_time.set(self.frame_time.get() + dt);
    }

    /// What frame `frame` did, with `reports`, the reports made during it.
    pub(crate) fn frame_report(&self, frame: u64, reports: Vec<Report>) -> FrameReport {
        FrameReport {
            frame,
            forwarded_calls: self.services.forwarded.get(),
            commands_applied: self.services.applied.get(),
            time: self.frame_time.get(),
            reports,
        }
    }

    /// After a drain that answered forwarded queries, waits for what the jobs that asked do
    /// next and drains it (`drain_mailbox`, the current generation's mailbox): another query
    /// is answered in this frame too, and the completion of a job that went on to record
    /// commands and return is applied in this frame, so a job that queries and then records
    /// settles in the frame it returned in. It waits only while a task of `current`'s engine
    /// VM waits on pool work (a follow-up of work nobody here awaits, a host's
    /// [`Promise`](crate::Promise) or a registered job's item, serves no task of this frame),
    /// parked on the mailbox. It stops at the first drain that answers no new query, after
    /// [`FrameReport::FOLLOW_UP_DRAINS`] drains, or when [`FrameReport::FOLLOW_UP_WAIT`] has passed since it began,
    /// whichever comes first. `answered`: the count of forwarded queries before the frame's
    /// first drain.
    pub(crate) fn drain_follow_ups(
        &self,
        current: &GenerationState,
        answered: u64,
        mut drain_mailbox: impl FnMut() -> bool,
    ) {
        let mut seen = answered;
        let mut until = None;
        for _ in 0..FrameReport::FOLLOW_UP_DRAINS {
            let now = self.services.forwarded.get();
            if now == seen || !current.vm.waits_on_pool() {
                return;
            }
            seen = now;
            let until = *until.get_or_insert_with(|| Instant::now() + FrameReport::FOLLOW_UP_WAIT);
            if current.rx.park_until(Some(until)) == Waited::TimedOut {
                return;
            }
            drain_mailbox();
        }
    }
}

/// Moves `current`'s frame counter on after the frame's drains: the early deferred drain first
/// (unless `early_drain` is false: an advance ran it before its phases), then the count, and
/// the frame waits it reached are woken (the late deferred drain resumes them). Answers the
/// frame.
pub(crate) fn count_frame(current: &GenerationState, early_drain: bool) -> u64 {
    if early_drain {
        current.vm.step();
    }
    let frame = current.principal.frames.fetch_add(1, Ordering::AcqRel) + 1;
    current.vm.wake_frames(frame);
    frame
}

/// The frame's side of running registered jobs: waits until every slot has settled, draining
/// `current`'s mailbox (`drain_mailbox`) whenever something reaches it (a forwarded query, the
/// commands an item recorded before it settles), at most [`FrameReport::WAVE_WAIT`] or the domain's run
/// deadline, whichever is shorter. Answers how long it waited.
pub(crate) fn settle_wave(
    current: &GenerationState,
    slots: &[Arc<OutcomeSlot>],
    mut drain_mailbox: impl FnMut() -> bool,
) -> Duration {
    let started = Instant::now();
    let until = started + FrameReport::WAVE_WAIT.min(current.principal.max_deadline);
    for slot in slots {
        while slot.is_pending() {
            // The bound first: a steady stream of messages must not hold the frame past it.
            let now = Instant::now();
            if now >= until {
                return now - started;
            }
            if !current.rx.is_empty() {
                drain_mailbox();
                continue;
            }
            slot.wait_settled_until(until.min(now + WAVE_POLL));
        }
    }
    started.elapsed()
}

/// Who a diagnostic of the engine thread names: domain `domain_name` as principal `id`, in
/// `context` when a context's handler ran.
pub(crate) fn attribution(
    domain_name: &str,
    id: Principal,
    context: Option<String>,
) -> Attribution {
    Attribution {
        domain_name: domain_name.to_owned(),
        domain: id.domain,
        generation: id.generation,
        context,
        actor: None,
    }
}

/// The warning that jobs `first` and `second` of registered-job phase `phase` both write
/// `name` and nothing orders them, for domain `domain_name` as principal `id`.
pub(crate) fn unordered_writes(
    domain_name: &str,
    id: Principal,
    phase: &str,
    first: &str,
    second: &str,
    name: &str,
) -> Diagnostic {
    let attribution = attribution(domain_name, id, None);
    let message = format!(
        "jobs '{first}' and '{second}' of phase '{phase}' both write '{name}' and nothing \
         orders them: they run in registration order; declare after or before to choose"
    );
    Diagnostic::new(DiagnosticKind::UnorderedWrites, attribution, message)
}
