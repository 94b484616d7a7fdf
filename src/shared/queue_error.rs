//! The ways a shared-queue operation fails. A refused push hands its value back, so nothing is
//! lost to an error.

use std::fmt;

use super::queue::{Reason, SharedQueue};
use crate::value::Message;

/// Why a push was refused.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum PushErrorKind {
    /// The queue holds its capacity already.
    Full,
    /// The queue was closed.
    Closed,
    /// The store ended (the domain stopped or restarted), for this reason.
    Ended(Reason),
    /// The value is nil, which a queue can't tell from "empty".
    Nil,
    /// A part of the value is not data a shared queue holds; the text names its path.
    NotData(String),
    /// The values waiting in the queue would weigh `would` bytes, past
    /// `MAX_QUEUE_BYTES` (64 MiB).
    TooManyBytes {
        /// What the queue would hold with the value.
        would: usize,
    },
    /// The domain's shared tables and queues would hold `would` bytes, past their bound `max`.
    StoreFull {
        /// What the store would hold with the value.
        would: usize,
        /// The store's bound.
        max: usize,
    },
    /// A ledger above the store refused the value's bytes: the domain's host memory or the
    /// pool's memory budget. The text says which, what it would hold and its budget.
    HostMemory(String),
}

/// A push that was refused, with the value it could not queue.
///
/// ```
/// use skein::{Message, Pool, ScriptDomain, DomainSpec};
///
/// let pool = Pool::new(1);
/// let domain = ScriptDomain::new(&pool, DomainSpec::new("main"))?;
/// let queue = domain.shared().queue("results", 1)?;
/// queue.push(Message::Integer(1))?;
/// let refused = queue.push(Message::Integer(2)).unwrap_err();
/// assert_eq!(refused.to_string(), "SharedQueue:push: queue 'results' is full (capacity 1)");
/// assert_eq!(refused.into_inner(), Message::Integer(2));
/// # Ok::<(), skein::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct PushError {
    /// Why.
    pub kind: PushErrorKind,
    queue: String,
    capacity: usize,
    value: Message,
}

impl PushError {
    pub(crate) fn new(queue: &SharedQueue, kind: PushErrorKind, value: Message) -> PushError {
        PushError {
            kind,
            queue: queue.display_name(),
            capacity: queue.capacity(),
            value,
        }
    }

    /// The value that was not queued.
    pub fn into_inner(self) -> Message {
        self.value
    }

    /// The name of the queue that refused.
    pub fn queue(&self) -> &str {
        &self.queue
    }
}

impl fmt::Display for PushError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = &self.queue;
        match &self.kind {
            PushErrorKind::Full => write!(
                f,
                "SharedQueue:push: queue '{name}' is full (capacity {})",
                self.capacity
            ),
            PushErrorKind::Closed => write!(f, "SharedQueue:push: queue '{name}' is closed"),
            PushErrorKind::Ended(reason) => {
                write!(f, "SharedQueue:push: queue '{name}' has ended: {reason}")
            }
            PushErrorKind::Nil => write!(f, "SharedQueue:push: value: a queue value can't be nil"),
            PushErrorKind::NotData(text) => write!(f, "SharedQueue:push: {text}"),
            PushErrorKind::TooManyBytes { would } => write!(
                f,
                "SharedQueue:push: queue '{name}' would hold {would} bytes, past its bound of {} bytes; pop some first",
                super::MAX_QUEUE_BYTES
            ),
            PushErrorKind::StoreFull { would, max } => write!(
                f,
                "SharedQueue:push: the domain's shared tables and queues would hold {would} bytes, past the bound of {max}"
            ),
            PushErrorKind::HostMemory(text) => write!(f, "SharedQueue:push: {text}"),
        }
    }
}

impl std::error::Error for PushError {}

/// Why a pop answered no value.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum PopError {
    /// The queue was closed and every value in it has been popped.
    Closed,
    /// The store ended (the domain stopped or restarted), for this reason.
    Ended(Reason),
}

impl fmt::Display for PopError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PopError::Closed => write!(f, "the queue is closed and empty"),
            PopError::Ended(reason) => write!(f, "the queue has ended: {reason}"),
        }
    }
}

impl std::error::Error for PopError {}

/// Why a queue could not be opened ([`SharedStore::queue`](super::SharedStore::queue),
/// `jobs.shared.queue`), with the text a user greps for. Nothing was made.
///
/// ```
/// use skein::shared::QueueOpenErrorKind;
/// use skein::{DomainSpec, Pool, ScriptDomain};
///
/// let pool = Pool::new(1);
/// let domain = ScriptDomain::new(&pool, DomainSpec::new("main"))?;
/// let err = domain.shared().queue("jobs", 0).unwrap_err();
/// assert_eq!(err.kind(), QueueOpenErrorKind::BadCapacity);
/// assert_eq!(err.to_string(), "SharedStore::queue: capacity must be 1 to 65536, got 0");
/// # Ok::<(), skein::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueOpenError {
    kind: QueueOpenErrorKind,
    message: String,
}

/// What kind of refusal a [`QueueOpenError`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QueueOpenErrorKind {
    /// A queue name that is not 1 to 256 bytes.
    BadName,
    /// A capacity that is not 1 to `MAX_QUEUE_CAPACITY` (65,536).
    BadCapacity,
    /// The queue exists with another capacity.
    OtherCapacity,
    /// The domain's shared names are all taken.
    Limit,
    /// The domain generation that owned the store ended.
    Ended,
}

impl QueueOpenError {
    pub(crate) fn new(kind: QueueOpenErrorKind, message: impl Into<String>) -> Self {
        QueueOpenError {
            kind,
            message: message.into(),
        }
    }

    /// What kind of refusal this is.
    pub fn kind(&self) -> QueueOpenErrorKind {
        self.kind
    }
}

impl fmt::Display for QueueOpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for QueueOpenError {}

impl From<QueueOpenError> for mlua::Error {
    fn from(e: QueueOpenError) -> Self {
        mlua::Error::runtime(e.message)
    }
}

/// Any refusal of a shared queue from the host: opening it, pushing to it or popping from it.
/// Each keeps its own error, and with it the value a push could not queue; it is what the
/// crate's error holds for a queue refusal reached through `?`.
///
/// ```
/// use std::error::Error as _;
/// use skein::shared::{PushError, QueueError};
/// use skein::{DomainSpec, Message, Pool, ScriptDomain};
///
/// let pool = Pool::new(1);
/// let domain = ScriptDomain::new(&pool, DomainSpec::new("main"))?;
/// let queue = domain.shared().queue("results", 1)?;
/// queue.push(Message::Integer(1))?;
/// let refused = QueueError::Push(queue.push(Message::Integer(2)).unwrap_err());
/// assert_eq!(refused.to_string(), "SharedQueue:push: queue 'results' is full (capacity 1)");
/// assert!(refused.source().is_some_and(|s| s.is::<PushError>()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum QueueError {
    /// The queue could not be opened.
    Open(QueueOpenError),
    /// A push was refused; the error holds the value.
    Push(PushError),
    /// A pop found the queue closed and empty, or ended.
    Pop(PopError),
}

impl fmt::Display for QueueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueueError::Open(e) => write!(f, "{e}"),
            QueueError::Push(e) => write!(f, "{e}"),
            QueueError::Pop(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for QueueError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            QueueError::Open(e) => Some(e),
            QueueError::Push(e) => Some(e),
            QueueError::Pop(e) => Some(e),
        }
    }
}
