//! The cell a host [`Promise`](crate::Promise) waits on: a worker settles it in place (a
//! [`ReplyTo::Host`](super::reply::ReplyTo::Host) reply), and any host thread may block on it.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use crate::vm::Outcome;

/// Where a worker delivers the outcome of work that host code awaits.
pub(crate) struct HostSlot {
    state: Mutex<Slot>,
    ready: Condvar,
}

/// The slot's state and how many threads sleep on it: a settle wakes the condvar (a system
/// call) only when somebody waits.
struct Slot {
    value: SlotState,
    waiters: u32,
}

/// Where a slot stands: waiting, holding its outcome, or emptied by the promise that took it.
pub(crate) enum SlotState {
    Pending,
    Settled(Outcome),
    Taken,
}

impl HostSlot {
    pub(crate) fn new() -> Arc<HostSlot> {
        Arc::new(HostSlot {
            state: Mutex::new(Slot {
                value: SlotState::Pending,
                waiters: 0,
            }),
            ready: Condvar::new(),
        })
    }

    /// Whether the slot still waits for its outcome.
    pub(crate) fn is_pending(&self) -> bool {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        matches!(state.value, SlotState::Pending)
    }

    /// Settles the slot; a second settlement (a late reply after a cancel) is dropped.
    pub(crate) fn settle(&self, outcome: Outcome) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if !matches!(state.value, SlotState::Pending) {
            return false;
        }
        state.value = SlotState::Settled(outcome);
        if state.waiters > 0 {
            self.ready.notify_all();
        }
        true
    }

    /// Blocks until the slot is no longer pending.
    pub(crate) fn wait_settled(&self) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while matches!(state.value, SlotState::Pending) {
            state.waiters += 1;
            state = self.ready.wait(state).unwrap_or_else(|e| e.into_inner());
            state.waiters -= 1;
        }
    }

    /// Blocks until the slot is no longer pending or `until` passes; answers whether it is
    /// still pending.
    pub(crate) fn wait_settled_until(&self, until: Instant) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while matches!(state.value, SlotState::Pending) {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return true;
            }
            state.waiters += 1;
            state = self
                .ready
                .wait_timeout(state, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
            state.waiters -= 1;
        }
        false
    }

    /// Takes the outcome out of a settled slot, leaving it taken; a pending slot stays pending.
    pub(crate) fn take(&self) -> SlotState {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match std::mem::replace(&mut state.value, SlotState::Taken) {
            SlotState::Pending => {
                state.value = SlotState::Pending;
                SlotState::Pending
            }
            taken => taken,
        }
    }

    /// Reads the slot's state in place.
    pub(crate) fn inspect<R>(&self, read: impl FnOnce(&SlotState) -> R) -> R {
        read(&self.state.lock().unwrap_or_else(|e| e.into_inner()).value)
    }
}
