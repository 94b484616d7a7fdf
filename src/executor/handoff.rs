//! The hand-off between a queued item and whoever may cancel it (its promise's side).
//!
//! An item sits in a queue while its caller may still cancel it, so two parties race for it: the
//! worker that takes it and the canceller. [`Handoff`] settles that race with one atomic byte so
//! that the item's body runs at most once and exactly one party settles its promise:
//!
//! ```text
//!   QUEUED --try_start--> RUNNING --finish--> DONE
//!     |                      |                 ^
//!   cancel                 cancel              |
//!     v                      v                 |
//!   CANCELLED         CANCEL_REQUESTED --finish-+
//! ```
//!
//! - `cancel` on `QUEUED` wins the item: the canceller settles, and the worker's `try_start`
//!   fails, so it drops the item unrun.
//! - `try_start` on `QUEUED` wins the item for the worker: from then on only the worker settles.
//!   A later `cancel` only asks it to stop (`CANCEL_REQUESTED`); the worker interrupts the body
//!   when it sees `cancel_requested`, and `finish` tells it whether to settle as cancelled.
//! - `cancel` after the end (`CANCELLED`, `DONE`) changes nothing and settles nothing.
//!
//! # Memory ordering
//!
//! Every transition is an acquire-release read-modify-write on the one byte, so the winner of the
//! `QUEUED` race sees everything the loser wrote before losing, and the worker's writes before
//! `finish` are visible to a canceller that reads `DONE`.

use crate::sync::{AtomicU8, Ordering};

/// Waiting in a queue; either party may still take it.
const QUEUED: u8 = 0;
/// A worker started the body; only the worker settles now.
const RUNNING: u8 = 1;
/// Started, and the canceller has asked the worker to stop.
const CANCEL_REQUESTED: u8 = 2;
/// Cancelled before it started; the canceller settled it and the body never runs.
const CANCELLED: u8 = 3;
/// The worker finished (normally or interrupted) and settled it.
const DONE: u8 = 4;

/// Where a [`Handoff`] stands, read with [`Handoff::state`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandoffState {
    /// Waiting in a queue.
    Queued,
    /// Being run by a worker.
    Running,
    /// Being run, and asked to stop.
    CancelRequested,
    /// Cancelled before it started.
    Cancelled,
    /// Finished by its worker.
    Done,
}

/// What [`Handoff::cancel`] found, which says who settles the promise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "the outcome says whether the canceller must settle the promise"]
pub enum CancelOutcome {
    /// The item had not started and now never will: the canceller settles it.
    Unstarted,
    /// A worker runs it: the worker interrupts it and settles it.
    Running,
    /// It had already ended (run or cancelled): nothing to do.
    Finished,
}

/// The state machine shared by one item and its canceller.
#[derive(Debug)]
pub struct Handoff(AtomicU8);

impl Default for Handoff {
    fn default() -> Self {
        Self::new()
    }
}

impl Handoff {
    /// A hand-off for an item that was just queued.
    pub fn new() -> Self {
        Self(AtomicU8::new(QUEUED))
    }

    /// The worker's claim on the item before running its body. False means it was cancelled and
    /// must be dropped unrun (its promise is already settled).
    pub fn try_start(&self) -> bool {
        self.0
            .compare_exchange(QUEUED, RUNNING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The canceller's move. See [`CancelOutcome`] for who settles afterwards.
    pub fn cancel(&self) -> CancelOutcome {
        let mut current = self.0.load(Ordering::Acquire);
        loop {
            let (next, outcome) = match current {
                QUEUED => (CANCELLED, CancelOutcome::Unstarted),
                RUNNING => (CANCEL_REQUESTED, CancelOutcome::Running),
                CANCEL_REQUESTED => return CancelOutcome::Running,
                _ => return CancelOutcome::Finished,
            };
            // The mutant stores over whatever the worker did since the load (loom-tests/README.md).
            #[cfg(loom_mutant = "handoff_cancel_blind_store")]
            {
                self.0.store(next, Ordering::Release);
                return outcome;
            }
            match self
                .0
                .compare_exchange(current, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return outcome,
                Err(seen) => current = seen,
            }
        }
    }

    /// Whether the worker has been asked to stop the body it is running.
    pub fn cancel_requested(&self) -> bool {
        self.0.load(Ordering::Acquire) == CANCEL_REQUESTED
    }

    /// The worker is done with the body (it will settle now). Returns whether a cancel was
    /// requested while it ran, so it settles as cancelled rather than with the body's result.
    ///
    /// Call only after a successful [`try_start`](Self::try_start), once.
    pub fn finish(&self) -> bool {
        let previous = self.0.swap(DONE, Ordering::AcqRel);
        debug_assert!(
            previous == RUNNING || previous == CANCEL_REQUESTED,
            "Handoff::finish without a successful try_start (state {previous})"
        );
        previous == CANCEL_REQUESTED
    }

    /// The current state, for diagnostics and tests.
    pub fn state(&self) -> HandoffState {
        match self.0.load(Ordering::Acquire) {
            QUEUED => HandoffState::Queued,
            RUNNING => HandoffState::Running,
            CANCEL_REQUESTED => HandoffState::CancelRequested,
            CANCELLED => HandoffState::Cancelled,
            _ => HandoffState::Done,
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn cancel_before_start_wins_and_start_then_fails() {
        let h = Handoff::new();
        assert_eq!(h.cancel(), CancelOutcome::Unstarted);
        assert_eq!(h.state(), HandoffState::Cancelled);
        assert!(!h.try_start());
        assert_eq!(
            h.cancel(),
            CancelOutcome::Finished,
            "a second cancel settles nothing"
        );
    }

    #[test]
    fn start_then_cancel_requests_and_finish_reports_it() {
        let h = Handoff::new();
        assert!(h.try_start());
        assert!(!h.cancel_requested());
        assert_eq!(h.cancel(), CancelOutcome::Running);
        assert!(h.cancel_requested());
        assert_eq!(
            h.cancel(),
            CancelOutcome::Running,
            "asking twice is still the worker's"
        );
        assert!(h.finish());
        assert_eq!(h.state(), HandoffState::Done);
        assert_eq!(h.cancel(), CancelOutcome::Finished);
    }

    #[test]
    fn uncancelled_run_finishes_clean() {
        let h = Handoff::new();
        assert!(h.try_start());
        assert!(!h.try_start(), "the body starts at most once");
        assert!(!h.finish());
        assert_eq!(h.state(), HandoffState::Done);
        assert_eq!(h.cancel(), CancelOutcome::Finished);
    }

    #[test]
    fn racing_threads_settle_exactly_once() {
        use std::sync::atomic::AtomicUsize;
        use std::sync::Arc;
        for _ in 0..2000 {
            let h = Arc::new(Handoff::new());
            let settled = Arc::new(AtomicUsize::new(0));
            let ran = Arc::new(AtomicUsize::new(0));
            let worker = {
                let (h, settled, ran) = (h.clone(), settled.clone(), ran.clone());
                std::thread::spawn(move || {
                    if h.try_start() {
                        ran.fetch_add(1, Ordering::Relaxed);
                        h.finish();
                        settled.fetch_add(1, Ordering::Relaxed);
                    }
                })
            };
            let outcome = h.cancel();
            if outcome == CancelOutcome::Unstarted {
                settled.fetch_add(1, Ordering::Relaxed);
            }
            worker.join().unwrap();
            assert_eq!(settled.load(Ordering::Relaxed), 1);
            let ran = ran.load(Ordering::Relaxed);
            assert_eq!(ran, usize::from(outcome != CancelOutcome::Unstarted));
        }
    }
}
