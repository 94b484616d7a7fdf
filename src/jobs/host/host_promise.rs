//! `Promise<T>`: the embedding side's handle on work it handed to the pool.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::jobs::leaves::outcome_slot::{OutcomeSlot, SlotState, SlotStatus};
use crate::jobs::protocol::job::JobShared;
use crate::value::Message;
use crate::vm::Outcome;

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
    slot: PromiseSlot,
    _value: PhantomData<fn() -> T>,
}

/// Where a promise's outcome lands.
enum PromiseSlot {
    /// A slot of its own: nothing to cancel beyond settling it.
    Alone(Arc<OutcomeSlot>),
    /// The slot inside a job the host dispatched, which a cancel also stops.
    Job(Arc<JobShared>),
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
    /// A promise of `slot`, which nothing else cancels.
    pub(crate) fn new(slot: Arc<OutcomeSlot>) -> Self {
        Promise {
            slot: PromiseSlot::Alone(slot),
            _value: PhantomData,
        }
    }

    /// A promise of the job the host dispatched: its outcome lands in the job's own slot.
    pub(crate) fn of_job(job: Arc<JobShared>) -> Self {
        Promise {
            slot: PromiseSlot::Job(job),
            _value: PhantomData,
        }
    }

    fn slot(&self) -> &OutcomeSlot {
        match &self.slot {
            PromiseSlot::Alone(slot) => slot,
            PromiseSlot::Job(job) => job.host_slot(),
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
        self.slot().wait_settled();
        self.try_take()
            .expect("a slot that is no longer pending answers try_take: settled or taken")
    }

    /// Waits at most `timeout`; answers `None` if the promise is still pending then.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<Result<Message>> {
        // A timeout too long to add to the clock (`Duration::MAX`) waits as `wait` does.
        let Some(until) = Instant::now().checked_add(timeout) else {
            return Some(self.wait_on_slot());
        };
        if self.slot().wait_settled_until(until) {
            return None;
        }
        self.try_take()
    }

    /// Takes the value if the promise has settled, without waiting.
    pub fn try_take(&mut self) -> Option<Result<Message>> {
        match self.slot().take() {
            SlotState::Pending => None,
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
        if !self.slot().settle(Outcome::Cancelled) {
            return false;
        }
        if let PromiseSlot::Job(job) = &self.slot {
            job.request_cancel();
        }
        true
    }

    /// Where the promise stands.
    pub fn status(&self) -> PromiseStatus {
        match self.slot().status() {
            SlotStatus::Pending => PromiseStatus::Pending,
            SlotStatus::Taken => PromiseStatus::Taken,
            SlotStatus::Resolved => PromiseStatus::Resolved,
            SlotStatus::Rejected => PromiseStatus::Rejected,
            SlotStatus::Cancelled => PromiseStatus::Cancelled,
        }
    }
}

impl<T> fmt::Debug for Promise<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Promise").finish_non_exhaustive()
    }
}
