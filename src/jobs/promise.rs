//! `Promise<T>`: the embedding side's handle on work it handed to the pool.

use std::fmt;
use std::marker::PhantomData;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::item::JobShared;
use crate::error::{Error, Result};
use crate::value::Message;
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

enum SlotState {
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
}

/// A value the pool will produce: the Rust counterpart of Luau's `PromiseHandle`.
///
/// Any thread may wait on it. Waiting blocks only the caller; the pool keeps running.
///
/// ```
/// use skein::{DomainSpec, Message, Plan, Pool, ScriptDomain};
///
/// let dir = tempfile::tempdir()?;
/// std::fs::write(dir.path().join("math.luau"), "return { double = function(x) return x * 2 end }")?;
/// let pool = Pool::new(2);
/// let spec = DomainSpec::new("demo").plan(Plan::new().root(dir.path()));
/// let domain = ScriptDomain::new(&pool, spec)?;
/// let promise = domain.dispatch("./math", "double", Message::Number(21.0))?;
/// assert_eq!(promise.wait()?, Message::Number(42.0));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// A promise may be waited on from any thread:
///
/// ```
/// fn assert_send<T: Send>() {}
/// assert_send::<skein::Promise>();
/// ```
#[must_use = "a promise does nothing unless waited on or cancelled"]
pub struct Promise<T = Message> {
    slot: Arc<HostSlot>,
    job: Option<Arc<JobShared>>,
    _value: PhantomData<fn() -> T>,
}

/// What [`Promise::status`] answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PromiseStatus {
    /// Not settled yet.
    Pending,
    /// Settled with a value.
    Resolved,
    /// Settled with an error.
    Rejected,
    /// Cancelled before it settled.
    Cancelled,
    /// Its value was already taken.
    Taken,
}

impl Promise<Message> {
    pub(crate) fn new(slot: Arc<HostSlot>, job: Option<Arc<JobShared>>) -> Self {
        Promise {
            slot,
            job,
            _value: PhantomData,
        }
    }

    /// Blocks until the promise settles and answers its value.
    ///
    /// Blocking stops the calling thread's domain too: called on a domain's engine thread, it
    /// waits forever for a job that forwards an engine-service query or whose commands the
    /// engine thread must apply first, because that thread is the one waiting. There, pump
    /// frames until [`try_take`](Self::try_take) answers, or await the work from Luau.
    ///
    /// # Errors
    /// [`Error::Job`] with the job's failure and Luau stack, or [`Error::Cancelled`].
    pub fn wait(mut self) -> Result<Message> {
        self.wait_on_slot()
    }

    /// Blocks until the slot is no longer pending, then takes its outcome.
    fn wait_on_slot(&mut self) -> Result<Message> {
        let mut state = self.slot.state.lock().unwrap_or_else(|e| e.into_inner());
        while matches!(state.value, SlotState::Pending) {
            state.waiters += 1;
            state = self
                .slot
                .ready
                .wait(state)
                .unwrap_or_else(|e| e.into_inner());
            state.waiters -= 1;
        }
        drop(state);
        self.try_take()
            .expect("a slot that is no longer pending answers try_take: settled or taken")
    }

    /// Waits at most `timeout`; answers `None` if the promise is still pending then.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<Result<Message>> {
        // A timeout too long to add to the clock (`Duration::MAX`) waits as `wait` does.
        let Some(until) = Instant::now().checked_add(timeout) else {
            return Some(self.wait_on_slot());
        };
        let mut state = self.slot.state.lock().unwrap_or_else(|e| e.into_inner());
        while matches!(state.value, SlotState::Pending) {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            state.waiters += 1;
            state = self
                .slot
                .ready
                .wait_timeout(state, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
            state.waiters -= 1;
        }
        drop(state);
        self.try_take()
    }

    /// Takes the value if the promise has settled, without waiting.
    pub fn try_take(&mut self) -> Option<Result<Message>> {
        let mut state = self.slot.state.lock().unwrap_or_else(|e| e.into_inner());
        match std::mem::replace(&mut state.value, SlotState::Taken) {
            SlotState::Pending => {
                state.value = SlotState::Pending;
                None
            }
            SlotState::Taken => Some(Err(Error::PromiseTaken)),
            SlotState::Settled(outcome) => Some(match outcome {
                Outcome::Resolved(message) => Ok(message),
                Outcome::Rejected(failure) => Err(Error::Job(Box::new((*failure).clone()))),
                Outcome::Cancelled => Err(Error::Cancelled),
            }),
        }
    }

    /// Cancels the work: a queued job never runs, a running one stops at its next interrupt or
    /// yield. Answers false when the promise had already settled.
    pub fn cancel(&self) -> bool {
        if !self.slot.settle(Outcome::Cancelled) {
            return false;
        }
        if let Some(job) = &self.job {
            job.request_cancel();
        }
        true
    }

    /// Where the promise stands.
    pub fn status(&self) -> PromiseStatus {
        match &self
            .slot
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .value
        {
            SlotState::Pending => PromiseStatus::Pending,
            SlotState::Taken => PromiseStatus::Taken,
            SlotState::Settled(Outcome::Resolved(_)) => PromiseStatus::Resolved,
            SlotState::Settled(Outcome::Rejected(_)) => PromiseStatus::Rejected,
            SlotState::Settled(Outcome::Cancelled) => PromiseStatus::Cancelled,
        }
    }
}

impl<T> fmt::Debug for Promise<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Promise").finish_non_exhaustive()
    }
}
