//! Who a task runs for: the job, warm pass or script its failures are attributed to, the
//! deadline its runs are held to, and what happens when its root task ends.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mlua::{Lua, MultiValue};

use super::budget::{CancelToken, DeadlineMessage};
use crate::ledger::{bounded_text, MAX_TEXT_BYTES};
use crate::principal::capability::Authority;
use crate::sync::Ordering;
use crate::value::Message;

/// Called once when the owner's root task ends.
/// Runs when an owner's root task ends, with its result and the engine-service commands the
/// owner's log still held (empty for an owner without a log).
pub(crate) type Completion =
    Box<dyn FnOnce(&Lua, Result<MultiValue, TaskFailure>, Vec<ServiceCall>)>;

/// What an owner is, seen from the scheduler: how reports name it (`job 'solver'`, `script
/// main.luau`) and the token that cancels it. A job's shared state implements it, so starting a
/// job allocates nothing for its label or its token.
pub(crate) trait OwnerIdentity: fmt::Display {
    /// The token that, once true, stops the owner's runs; `None` for owners that can't be
    /// cancelled (scripts the host started).
    fn cancel_token(&self) -> Option<&CancelToken> {
        None
    }

    /// The key the owner runs as (`opts.key`), if any: `jobs.context().key`, and what an await
    /// of a promise of the same key is refused for.
    fn key(&self) -> Option<&[u8]> {
        None
    }

    /// Whether the owner is the first item its key runs in this VM since the key bound.
    fn fresh(&self) -> bool {
        false
    }

    /// How a `jobs.warm` entry that is still running names itself (`"./registry".build`), so an
    /// await of a pool promise from it (or from a task it started) is refused: the pool it
    /// would wait on is the one it is warming. `None` for every other owner, and for a warm
    /// whose entry has ended.
    fn warm(&self) -> Option<&str> {
        None
    }

    /// The id of the registered job (`jobs.register`) the owner is an item of, so the engine
    /// thread counts the owner's forwarded queries for that job.
    fn registered_job(&self) -> Option<u64> {
        None
    }
}

impl OwnerIdentity for String {}
impl OwnerIdentity for &'static str {}

/// The principal-side identity of a group of tasks: one job item, or one script.
pub(crate) struct Owner {
    /// Its name in reports and its cancel token.
    pub(crate) identity: Arc<dyn OwnerIdentity>,
    /// The longest one run (resume to next yield) of any of its tasks may take.
    pub(crate) deadline: Duration,
    /// A bound on the owner's whole life in wall time (a warm entry's), read at each resume of
    /// its tasks: when and how long. `None` for almost every owner.
    bound: Cell<Option<(Instant, Duration)>>,
    completion: RefCell<Option<Completion>>,
    /// The engine-service commands a job's tasks record, when the owner is a job.
    pub(crate) commands: Option<CommandLog>,
    /// The authority its tasks run under (a pool item's, carried from its dispatcher); `None`
    /// runs them under the VM's own (its principal's grant).
    pub(crate) authority: Option<Arc<Authority>>,
    /// How many of its tasks are parked on promises of pool work: a frame joins the handler
    /// calls that wait on the pool (`domain/frame/join.rs`). Kept by the scheduler as it parks
    /// and wakes them.
    pool_waits: Cell<u32>,
}

/// One engine-service call on its way to the engine thread: the service's name and its
/// arguments.
pub(crate) type ServiceCall = (Arc<str>, Message);

/// The engine-service commands one job recorded and has not yet sent to its engine thread, in
/// the order its tasks recorded them. Lives on the worker thread that runs the job.
#[derive(Default)]
pub(crate) struct CommandLog {
    entries: RefCell<Vec<ServiceCall>>,
    /// Set once the job's entry has returned: later commands are no longer held for its
    /// settlement and leave one at a time.
    closed: Cell<bool>,
}

impl CommandLog {
    /// Records a command; answers it back when the log is closed (the caller sends it alone).
    pub(crate) fn record(&self, call: ServiceCall) -> Option<ServiceCall> {
        if self.closed.get() {
            return Some(call);
        }
        self.entries.borrow_mut().push(call);
        None
    }

    /// Takes what was recorded so far (a forwarded query carries it ahead of itself).
    pub(crate) fn take(&self) -> Vec<ServiceCall> {
        std::mem::take(&mut *self.entries.borrow_mut())
    }

    /// Closes the log (the entry returned) and takes what it held.
    pub(crate) fn close(&self) -> Vec<ServiceCall> {
        self.closed.set(true);
        self.take()
    }
}

impl Owner {
    /// A new owner.
    pub(crate) fn new(
        identity: Arc<dyn OwnerIdentity>,
        deadline: Duration,
        completion: Option<Completion>,
    ) -> Owner {
        Owner {
            identity,
            deadline,
            bound: Cell::new(None),
            completion: RefCell::new(completion),
            commands: None,
            authority: None,
            pool_waits: Cell::new(0),
        }
    }

    /// The owner of one pool job: its tasks run under `authority` and record engine-service
    /// commands in its log. The same as `new(..).with_commands().with_authority(..)`, made in
    /// one piece (an item makes one per job).
    pub(crate) fn job(
        identity: Arc<dyn OwnerIdentity>,
        deadline: Duration,
        authority: Arc<Authority>,
    ) -> Owner {
        Owner {
            identity,
            deadline,
            bound: Cell::new(None),
            completion: RefCell::new(None),
            commands: Some(CommandLog::default()),
            authority: Some(authority),
            pool_waits: Cell::new(0),
        }
    }

    /// Lets go of what a finished owner holds (its identity becomes `idle`, its authority, its
    /// completion and commands go), so that an allocation nothing else holds can be made the
    /// next job's owner in place without keeping this one's job alive meanwhile.
    pub(crate) fn release(&mut self, idle: Arc<dyn OwnerIdentity>) {
        self.identity = idle;
        self.authority = None;
        self.completion = RefCell::new(None);
        self.commands = None;
        self.bound.set(None);
        self.pool_waits.set(0);
    }

    /// Runs the owner's tasks under `authority` instead of the VM's own.
    pub(crate) fn with_authority(mut self, authority: Arc<Authority>) -> Owner {
        self.authority = Some(authority);
        self
    }

    /// Gives the owner a command log: its tasks' engine-service commands are recorded there,
    /// and what it holds when the root task ends goes to the completion.
    pub(crate) fn with_commands(mut self) -> Owner {
        self.commands = Some(CommandLog::default());
        self
    }

    /// The token that cancels the owner's runs.
    pub(crate) fn cancel_token(&self) -> Option<&CancelToken> {
        self.identity.cancel_token()
    }

    /// Whether the owner was cancelled.
    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancel_token()
            .is_some_and(|c| c.load(Ordering::Acquire))
    }

    /// Bounds the owner's tasks: none of them is resumed once `limit` has passed since `start`.
    pub(crate) fn set_bound(&self, start: Instant, limit: Duration) {
        self.bound.set(Some((start, limit)));
    }

    /// Lifts the bound (the warm entry ended; the tasks it left behind serve on unbounded).
    pub(crate) fn clear_bound(&self) {
        self.bound.set(None);
    }

    /// The bound's length when it has passed at `now`.
    pub(crate) fn bound_passed(&self, now: Instant) -> Option<Duration> {
        let (start, limit) = self.bound.get()?;
        (now.saturating_duration_since(start) >= limit).then_some(limit)
    }

    /// When the bound passes, if the owner has one.
    pub(crate) fn bound_at(&self) -> Option<Instant> {
        self.bound.get().map(|(start, limit)| start + limit)
    }

    /// Whether any of the owner's tasks is parked on a promise of pool work.
    pub(crate) fn waits_on_pool(&self) -> bool {
        self.pool_waits.get() > 0
    }

    /// One of its tasks parked on pool work (`to`: true) or stopped waiting (false).
    pub(crate) fn count_pool_wait(&self, to: bool) {
        let n = self.pool_waits.get();
        self.pool_waits
            .set(if to { n + 1 } else { n.saturating_sub(1) });
    }

    /// Whether the owner is bounded at all: a cheap test for the scheduler's hot path.
    pub(crate) fn is_bounded(&self) -> bool {
        self.bound.get().is_some()
    }

    /// Gives an owner made without a completion one now: a call whose root task is still
    /// running after its first run (see `Vm::call`) says only then what its end should do, so
    /// a call that returns at once allocates nothing for it.
    pub(crate) fn set_completion(&self, completion: Completion) {
        *self.completion.borrow_mut() = Some(completion);
    }

    /// Runs the completion, once.
    pub(crate) fn complete(&self, lua: &Lua, result: Result<MultiValue, TaskFailure>) {
        let completion = self.completion.borrow_mut().take();
        if let Some(completion) = completion {
            let commands = self.commands.as_ref().map(CommandLog::close);
            completion(lua, result, commands.unwrap_or_default());
        }
    }
}

/// Why a task ended without returning.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum TaskFailure {
    /// The task raised an error.
    Raised {
        /// The error message.
        message: String,
        /// The Luau stack where it was raised.
        traceback: String,
    },
    /// One run passed the deadline.
    Deadline(Duration),
    /// The task's owner was cancelled.
    Cancelled,
    /// Host (Rust) code called from the task panicked.
    Panicked(String),
    /// The owner's whole life ran past its bound in wall time (a warm entry's bound).
    Bound(Duration),
}

impl TaskFailure {
    /// A raised error, its message and its stack each cut to [`MAX_TEXT_BYTES`]: a script may
    /// raise a string as large as its VM holds, and the host keeps the failure after the VM
    /// has let go of it.
    pub(crate) fn raised(message: String, traceback: String) -> Self {
        TaskFailure::Raised {
            message: bounded_text(message, MAX_TEXT_BYTES),
            traceback: bounded_text(traceback, MAX_TEXT_BYTES),
        }
    }

    pub(crate) fn deadline(d: Duration) -> Self {
        TaskFailure::Deadline(d)
    }

    pub(crate) fn cancelled() -> Self {
        TaskFailure::Cancelled
    }

    pub(crate) fn panicked(payload: &Box<dyn std::any::Any + Send>) -> Self {
        TaskFailure::Panicked(panic_message(payload))
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        matches!(self, TaskFailure::Cancelled)
    }
}

impl fmt::Display for TaskFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TaskFailure::Raised { message, traceback } => {
                write!(f, "{message}")?;
                if !traceback.is_empty() {
                    write!(f, "\n{traceback}")?;
                }
                Ok(())
            }
            TaskFailure::Deadline(d) => write!(f, "{}", DeadlineMessage(*d)),
            TaskFailure::Cancelled => write!(f, "cancelled"),
            TaskFailure::Panicked(message) => write!(f, "host code panicked: {message}"),
            TaskFailure::Bound(d) => write!(
                f,
                "warm bound exceeded: the entry ran longer than {} s of wall time, waits included",
                super::budget::format_seconds(*d)
            ),
        }
    }
}

/// The text of a panic payload.
pub(crate) fn panic_message(payload: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".to_owned()
    }
}
