//! The frame driver: what a domain keeps from one frame to the next, as one part with its own
//! fields. The fixed step and what `advance` was given that has not made a whole step yet, the
//! frame time so far, the longest a frame waits for the pool work its handlers await, when
//! `run_until_idle` last ran the registered jobs, the host's engine services with this frame's
//! counts, which scheduler entry is running, and one spare handler owner.
//!
//! This file holds the part and its scheduler entry ([`FrameDriver::enter`]); its frame round is
//! in `mod.rs`, its advance and handler calls in `phases.rs`.
//!
//! Its invariants: `accumulator` is always less than one fixed step after an `advance`
//! (the steps owed, up to the catch-up bound, are run, the rest dropped); `busy` is set only
//! while an entry point runs the engine VM, so a second one is refused as reentrant; the spare
//! owner is held by nothing else.

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use super::context::FixedStep;
use super::engine_services::{EngineServices, FrameReport};
use crate::domain::lifecycle::DomainState;
use crate::domain::reporting::Reporting;
use crate::domain::{Report, ReportKind};
use crate::error::{Error, Halt, Result};
use crate::vm::Owner;

/// The frame-to-frame state of one domain.
pub(crate) struct FrameDriver {
    /// The host's engine services and this frame's counts.
    pub(crate) services: Rc<EngineServices>,
    /// The sum of the `dt` given to `frame`.
    pub(crate) frame_time: Cell<Duration>,
    /// The scheduler entry running now, if any: a second one is `Reentrant`.
    pub(crate) busy: Cell<Option<&'static str>>,
    pub(crate) fixed_step: FixedStep,
    /// The longest an advance or a phase waits for the pool work its handlers await.
    pub(crate) frame_budget: Duration,
    /// Time `advance` was given that has not made a whole fixed step yet.
    pub(crate) accumulator: Cell<Duration>,
    /// When `run_until_idle` last ran the registered jobs: they run at most once per frame
    /// interval there (`pump::FRAME_INTERVAL`).
    pub(crate) jobs_ran: Cell<Option<Instant>>,
    /// The owner of the last handler call, kept when that call ended in its first run and
    /// nothing else held it: the next call refills it instead of allocating one.
    pub(crate) spare_owner: Cell<Option<Rc<Owner>>>,
}

impl FrameDriver {
    pub(crate) fn new(fixed_step: FixedStep, frame_budget: Duration) -> FrameDriver {
        FrameDriver {
            services: Rc::new(EngineServices::default()),
            frame_time: Cell::new(Duration::ZERO),
            busy: Cell::new(None),
            fixed_step,
            frame_budget,
            accumulator: Cell::new(Duration::ZERO),
            jobs_ran: Cell::new(None),
            spare_owner: Cell::new(None),
        }
    }

    /// Marks the start of scheduler entry `entry` of domain `domain`, which is in `state`:
    /// refuses a stopping or stopped domain and a nested entry.
    pub(crate) fn enter(
        &self,
        entry: &'static str,
        state: DomainState,
        domain: &str,
    ) -> Result<Entered<'_>> {
        let halted = match state {
            DomainState::Stopping => Some(Halt::Stopping),
            DomainState::Stopped => Some(Halt::Stopped),
            _ => None,
        };
        if let Some(state) = halted {
            return Err(Error::Stopped {
                entry,
                domain: domain.to_owned(),
                state,
                new_generation: false,
            });
        }
        if self.busy.get().is_some() {
            return Err(Error::Reentrant(entry));
        }
        self.busy.set(Some(entry));
        Ok(Entered(&self.busy))
    }

    /// What a frame that [`enter`](Self::enter) refused with `e` answers, `frame` being the
    /// frame counter: it counts nothing. A reentrant one is kept as a report in `reporting`.
    pub(crate) fn refused_frame(&self, e: Error, frame: u64, reporting: &Reporting) -> FrameReport {
        if matches!(e, Error::Reentrant(_)) {
            reporting.keep(Report::new(ReportKind::Service, "frame", e.to_string()));
        }
        FrameReport {
            frame,
            forwarded_calls: 0,
            commands_applied: 0,
            time: self.frame_time.get(),
            reports: Vec::new(),
        }
    }
}

/// Clears the scheduler's busy flag when an entry ends, however it ends.
pub(crate) struct Entered<'a>(&'a Cell<Option<&'static str>>);

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        self.0.set(None);
    }
}
