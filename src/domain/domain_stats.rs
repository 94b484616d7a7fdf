//! A domain's counters at one moment: [`DomainStats`], what
//! [`ScriptDomain::stats`](super::ScriptDomain::stats) answers.
//!
//! Most of what it answers is read from where the work is kept (the queue, the VM, the
//! workers); the running totals that nothing else keeps live in [`Counters`], a part of the
//! domain's reporting, bumped on the engine thread where the work happens. A total only grows
//! (saturating), over every generation.

use std::cell::Cell;

use super::DomainState;
use crate::principal::{Generation, Severity};

/// The running totals of a domain, over its whole life (every generation).
#[derive(Default)]
pub(crate) struct Counters {
    handler_calls: Cell<u64>,
    events_delivered: Cell<u64>,
    events_unhandled: Cell<u64>,
    events_dropped_at_stop: Cell<u64>,
    errors: Cell<u64>,
    warnings: Cell<u64>,
}

/// The running totals at one moment, as [`DomainStats`] answers them.
pub(crate) struct Totals {
    pub(crate) handler_calls: u64,
    pub(crate) events_delivered: u64,
    pub(crate) events_unhandled: u64,
    pub(crate) events_dropped_at_stop: u64,
    pub(crate) errors: u64,
    pub(crate) warnings: u64,
}

fn bump(cell: &Cell<u64>, by: u64) {
    cell.set(cell.get().saturating_add(by));
}

impl Counters {
    pub(crate) fn handler_calls(&self, calls: usize) {
        bump(&self.handler_calls, calls as u64);
    }

    pub(crate) fn drained(&self, delivered: usize, unhandled: usize) {
        bump(&self.events_delivered, delivered as u64);
        bump(&self.events_unhandled, unhandled as u64);
    }

    pub(crate) fn dropped_at_stop(&self, events: usize) {
        bump(&self.events_dropped_at_stop, events as u64);
    }

    /// The totals now.
    pub(crate) fn totals(&self) -> Totals {
        Totals {
            handler_calls: self.handler_calls.get(),
            events_delivered: self.events_delivered.get(),
            events_unhandled: self.events_unhandled.get(),
            events_dropped_at_stop: self.events_dropped_at_stop.get(),
            errors: self.errors.get(),
            warnings: self.warnings.get(),
        }
    }

    pub(crate) fn diagnosed(&self, severity: Severity) {
        match severity {
            Severity::Error => bump(&self.errors, 1),
            Severity::Warning => bump(&self.warnings, 1),
        }
    }
}

/// What a domain has done and holds, at the moment [`ScriptDomain::stats`](crate::ScriptDomain::stats) was called.
///
/// Totals (`handler_calls`, `events_delivered`, `events_unhandled`, `events_dropped_at_stop`,
/// `errors`, `warnings`, `stale_events`, `denials`) count over the domain's whole life, across
/// restarts; the rest describe the current generation.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DomainStats {
    /// The current generation.
    pub generation: Generation,
    /// Where the domain is in its life.
    pub state: DomainState,
    /// Engine frames run.
    pub frames: u64,
    /// Tasks alive in the engine VM (waiting or ready).
    pub tasks: usize,
    /// Contexts the host declared.
    pub contexts: usize,
    /// Handler calls made by phases and event drains (context handlers and named-event
    /// handlers), a call that failed included.
    pub handler_calls: u64,
    /// Events a drain handed to at least one handler.
    pub events_delivered: u64,
    /// Events a drain found no handler for: counted and dropped.
    pub events_unhandled: u64,
    /// Events still queued when [`ScriptDomain::stop`](crate::ScriptDomain::stop) ran (those its shutdown handlers emitted
    /// included): dropped undelivered and counted.
    pub events_dropped_at_stop: u64,
    /// Events waiting in the queue now.
    pub events_pending: usize,
    /// Bytes of payload (`Message::queue_weight`) waiting in the queue now.
    pub events_pending_bytes: usize,
    /// Events of ended generations that reached the domain and were discarded.
    pub stale_events: u64,
    /// Capability checks that failed.
    pub denials: u64,
    /// Diagnostics of severity `Error`: handlers that raised or overran, refused emits.
    pub errors: u64,
    /// Diagnostics of severity `Warning`: route copies not delivered.
    pub warnings: u64,
    /// Reports waiting for [`ScriptDomain::take_reports`](crate::ScriptDomain::take_reports).
    pub reports_waiting: usize,
    /// `@skein/worker` threads that have not ended.
    pub live_actors: usize,
    /// Native resources the current generation owns ([`ScriptDomain::own`](crate::ScriptDomain::own)).
    pub owned_resources: usize,
    /// Jobs registered with `jobs.register` or as kernels, live now.
    pub registered_jobs: usize,
    /// Bytes the current generation's dispatched jobs hold in the host now (their arguments
    /// and results, and [`JOB_WEIGHT`](crate::DomainSpec::JOB_WEIGHT) each), of at most
    /// [`MAX_JOB_BYTES`](crate::DomainSpec::MAX_JOB_BYTES).
    pub job_bytes: usize,
    /// Bytes the current generation's shared tables and queues hold now.
    pub shared_bytes: usize,
    /// Chunks the current generation's engine VM handed to the code generator (its workers'
    /// VMs count in [`Pool::stats`](crate::Pool::stats)).
    pub engine_native_modules: usize,
    /// Executable memory the engine VM's code generator has mapped, in bytes: 4 MiB blocks, at
    /// most 16 MiB (0 until the VM first compiles a module natively).
    pub engine_native_code_bytes: usize,
}
