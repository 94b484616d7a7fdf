//! Who a task runs for: the job, warm pass or script its failures are attributed to, the
//! deadline its runs are held to, and what happens when its root task ends.

use std::cell::RefCell;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use mlua::{Lua, MultiValue};

use super::budget::{CancelToken, DeadlineMessage};
use crate::sync::Ordering;

/// Called once when the owner's root task ends.
pub(crate) type Completion = Box<dyn FnOnce(&Lua, Result<MultiValue, TaskFailure>)>;

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
}

impl OwnerIdentity for String {}
impl OwnerIdentity for &'static str {}

/// The principal-side identity of a group of tasks: one job item, or one script.
pub(crate) struct Owner {
    /// Its name in reports and its cancel token.
    pub(crate) identity: Arc<dyn OwnerIdentity>,
    /// The longest one run (resume to next yield) of any of its tasks may take.
    pub(crate) deadline: Duration,
    completion: RefCell<Option<Completion>>,
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
            completion: RefCell::new(completion),
        }
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

    /// Runs the completion, once.
    pub(crate) fn complete(&self, lua: &Lua, result: Result<MultiValue, TaskFailure>) {
        let completion = self.completion.borrow_mut().take();
        if let Some(completion) = completion {
            completion(lua, result);
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
}

impl TaskFailure {
    pub(crate) fn raised(message: String, traceback: String) -> Self {
        TaskFailure::Raised { message, traceback }
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
