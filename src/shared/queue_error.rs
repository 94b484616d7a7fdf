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
    /// [`MAX_QUEUE_BYTES`](super::MAX_QUEUE_BYTES).
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
        }
    }
}

impl std::error::Error for PushError {}

impl From<PushError> for crate::Error {
    fn from(e: PushError) -> Self {
        crate::Error::Refused(e.to_string())
    }
}

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

impl From<PopError> for crate::Error {
    fn from(e: PopError) -> Self {
        crate::Error::Refused(e.to_string())
    }
}
