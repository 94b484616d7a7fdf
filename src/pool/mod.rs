//! The work-stealing executor core: threads, queues, sleep/wake, item hand-off and stats.
//!
//! Generic over what an item does ([`executor::WorkerLogic`]), so it has no Luau in it and loom can
//! model it (`loom-tests/`). The Luau worker that implements the logic lives elsewhere. See
//! `README.md` in this folder for the sleep/wake protocol and the hand-off state machine.
//!
//! Types the loom models use are `pub` so `crate::__loom` can re-export them; the module itself
//! is private, so outside `cfg(loom)` they are crate-internal like everything else here.
// A few items (state inspectors, `HandoffState`) exist for the loom models and unit tests only.
#![cfg_attr(not(any(test, loom)), allow(dead_code))]

pub(crate) mod executor;
pub(crate) mod handoff;
pub(crate) mod lanes;
mod queue;
pub(crate) mod sleep;
pub(crate) mod stats;
