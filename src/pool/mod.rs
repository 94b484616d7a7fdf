//! The work-stealing executor core: threads, queues, sleep/wake, item hand-off and stats.
//!
//! Generic over what an item does ([`executor::WorkerLogic`]), so it has no Luau in it and loom can
//! model it (`loom-tests/`). The Luau worker that implements the logic lives elsewhere. See
//! `README.md` in this folder for the sleep/wake protocol and the hand-off state machine.
//!
//! Types the loom models use are `pub` so `crate::__loom` can re-export them; the module itself
//! is private, so outside `cfg(loom)` they are crate-internal like everything else here.
// The Luau worker that drives this core is not written yet; until it is, the crate's only users
// of most items here are the tests.
#![allow(dead_code)]

pub(crate) mod executor;
pub(crate) mod handoff;
mod queue;
pub(crate) mod sleep;
pub(crate) mod stats;

// What the Luau worker and `lib.rs` (for `WorkerStats`) import; unused until they exist.
#[allow(unused_imports)]
pub(crate) use executor::{Executor, Poll, WorkerContext, WorkerLogic};
#[allow(unused_imports)]
pub(crate) use handoff::{CancelOutcome, Handoff, HandoffState};
#[allow(unused_imports)]
pub(crate) use stats::WorkerStats;
