//! Skein runs Luau in parallel inside a Rust process.
//!
//! A host embeds Skein as its parallel compute backend: a work-stealing [`pool`](Pool) of worker
//! threads, each owning isolated Luau VMs, runs the work that script domains hand it through
//! `jobs.dispatch` and friends. Values cross between VMs as [`Message`]s, copied once each way.
#![warn(missing_docs)]

mod pool;
mod sync;
mod value;
mod vm;

/// The pool's lock-free protocols, exposed only to the loom models in `loom-tests`.
#[cfg(loom)]
#[doc(hidden)]
pub mod __loom {
    pub use crate::pool::executor::{Executor, Poll, WorkerContext, WorkerLogic};
    pub use crate::pool::handoff::{CancelOutcome, Handoff, HandoffState};
    pub use crate::pool::sleep::{Sleep, SleepOutcome, AWAKE, SLEEPING};
    pub use crate::pool::stats::WorkerStats;
}
