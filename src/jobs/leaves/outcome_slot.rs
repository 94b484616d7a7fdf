//! The slot a Rust [`Promise`](crate::Promise) waits on: a worker settles it in place (a
//! [`ReplyTo::Slot`](crate::jobs::ReplyTo::Slot) or
//! [`ReplyTo::HostJob`](crate::jobs::ReplyTo::HostJob) reply), and any thread may block on it:
//! the host's, an actor's waiting for a forwarded query's answer, the engine thread waiting for
//! a registered job's items.
//!
//! It is a [`OneShot`] (`executor/one_shot.rs`, loom-checked): a settle with nobody waiting is
//! two atomic operations, and only a settle that finds a thread parked on the slot unparks it.

use std::sync::Arc;
use std::time::Instant;

use crate::executor::one_shot::{OneShot, Standing, Took};
use crate::executor::wake_queue::Waited;
use crate::vm::Outcome;

/// The kinds an outcome is settled as, so the slot answers where it stands without reading it.
const RESOLVED: u8 = 0;
const REJECTED: u8 = 1;
const CANCELLED: u8 = 2;

/// Where a worker delivers the outcome of work that Rust code awaits: alone behind an `Arc`
/// ([`ReplyTo::Slot`](crate::jobs::ReplyTo::Slot)), or inside the job the host dispatched
/// ([`ReplyTo::HostJob`](crate::jobs::ReplyTo::HostJob)).
#[derive(Default)]
pub(crate) struct OutcomeSlot {
    cell: OneShot<Outcome>,
}

/// Where a slot stands: waiting, holding its outcome, or emptied by the promise that took it.
pub(crate) enum SlotState {
    Pending,
    Settled(Outcome),
    Taken,
}

/// Where a slot stands, without its outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SlotStatus {
    Pending,
    Resolved,
    Rejected,
    Cancelled,
    Taken,
}

impl OutcomeSlot {
    pub(crate) fn new() -> Arc<OutcomeSlot> {
        Arc::new(OutcomeSlot {
            cell: OneShot::new(),
        })
    }

    /// Whether the slot still waits for its outcome.
    pub(crate) fn is_pending(&self) -> bool {
        self.cell.standing() == Standing::Pending
    }

    /// Settles the slot; a second settlement (a late reply after a cancel) is dropped.
    pub(crate) fn settle(&self, outcome: Outcome) -> bool {
        let kind = match outcome {
            Outcome::Resolved(_) => RESOLVED,
            Outcome::Rejected(_) => REJECTED,
            Outcome::Cancelled => CANCELLED,
        };
        self.cell.settle(outcome, kind).is_ok()
    }

    /// Blocks until the slot is no longer pending.
    pub(crate) fn wait_settled(&self) {
        self.cell.wait_until(None);
    }

    /// Blocks until the slot is no longer pending or `until` passes; answers whether it is
    /// still pending.
    pub(crate) fn wait_settled_until(&self, until: Instant) -> bool {
        self.cell.wait_until(Some(until)) == Waited::TimedOut
    }

    /// Takes the outcome out of a settled slot, leaving it taken; a pending slot stays pending.
    pub(crate) fn take(&self) -> SlotState {
        match self.cell.take() {
            Took::Pending => SlotState::Pending,
            Took::Value(outcome) => SlotState::Settled(outcome),
            Took::Taken => SlotState::Taken,
        }
    }

    /// Where the slot stands.
    pub(crate) fn status(&self) -> SlotStatus {
        match self.cell.standing() {
            Standing::Pending => SlotStatus::Pending,
            Standing::Taken => SlotStatus::Taken,
            Standing::Settled(RESOLVED) => SlotStatus::Resolved,
            Standing::Settled(REJECTED) => SlotStatus::Rejected,
            Standing::Settled(_) => SlotStatus::Cancelled,
        }
    }
}
