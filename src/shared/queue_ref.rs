//! The host's handle on a shared queue: [`SharedQueueRef`], reached through
//! [`SharedStore::queue`](super::SharedStore::queue).
//!
//! A host thread may block ([`SharedQueueRef::pop_blocking`]); a Luau task never blocks its
//! thread (see `queue_api`).

use std::fmt;
use std::time::{Duration, Instant};

use super::queue::{Delivery, PopNow, SharedQueue};
use super::queue::{DEFAULT_QUEUE_CAPACITY, MAX_QUEUE_BYTES, MAX_QUEUE_CAPACITY};
use super::queue_error::{PopError, PushError};
use crate::sync::{park_until, thread, Arc, Mutex};
use crate::value::Message;

/// A handle on one shared queue of a domain, usable from any thread. Cheap to clone; every
/// clone is the same queue, the one Luau reaches as `jobs.shared.queue(name)`.
///
/// ```
/// use std::time::Duration;
/// use skein::{DomainSpec, Message, Pool, ScriptDomain};
///
/// let pool = Pool::new(1);
/// let domain = ScriptDomain::new(&pool, DomainSpec::new("main"))?;
/// let queue = domain.shared().queue("events", 16)?;
/// domain.eval(r#"jobs.shared.queue("events"):push("spawn")"#)?;
/// let event = queue.pop_blocking(Duration::from_secs(1))?;
/// assert_eq!(event, Some(Message::String("spawn".into())));
/// assert_eq!(queue.try_pop()?, None);
/// # Ok::<(), skein::Error>(())
/// ```
#[derive(Clone)]
#[must_use]
pub struct SharedQueueRef {
    pub(crate) queue: Arc<SharedQueue>,
}

impl fmt::Debug for SharedQueueRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedQueueRef")
            .field("name", &self.queue.display_name())
            .field("capacity", &self.queue.capacity())
            .field("len", &self.queue.len())
            .finish()
    }
}

/// Where a blocked host pop receives its delivery.
struct BlockedPop {
    delivery: Mutex<Option<Delivery>>,
    thread: thread::Thread,
}

impl SharedQueueRef {
    /// How much what waits in one queue may weigh (by `Message::queue_weight`): 64 MiB.
    pub const MAX_BYTES: usize = MAX_QUEUE_BYTES;

    /// The largest capacity a queue may be opened with: 65,536 values.
    pub const MAX_CAPACITY: usize = MAX_QUEUE_CAPACITY;

    /// The capacity of a queue opened without one: 1,024 values.
    pub const DEFAULT_CAPACITY: usize = DEFAULT_QUEUE_CAPACITY;

    /// The queue's name (invalid UTF-8 replaced).
    pub fn name(&self) -> String {
        self.queue.display_name()
    }

    /// The most values the queue holds.
    pub fn capacity(&self) -> usize {
        self.queue.capacity()
    }

    /// Values waiting to be popped now.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether no value waits to be popped now.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Whether the queue was closed (it may still hold values to drain).
    pub fn is_closed(&self) -> bool {
        self.queue.is_closed()
    }

    /// Pops waiting for a value now: parked Luau tasks and blocked host threads. A host (or a
    /// test) reads it to know a pop has parked before it acts on the queue.
    ///
    /// ```
    /// use std::time::Duration;
    /// use skein::{DomainSpec, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let domain = ScriptDomain::new(&pool, DomainSpec::new("main"))?;
    /// let queue = domain.shared().queue("events", 16)?;
    /// assert_eq!(queue.waiters(), 0);
    /// domain.exec(r#"task.spawn(function() jobs.shared.queue("events"):pop() end)"#)?;
    /// assert_eq!(queue.waiters(), 1);
    /// # Ok::<(), skein::Error>(())
    /// ```
    pub fn waiters(&self) -> usize {
        self.queue.waiters()
    }

    /// Puts a copy of `value` at the back, or hands it to a waiting pop. `value` is a
    /// [`Message`] or anything with a `From` impl into one (`q.push("job")`).
    ///
    /// # Errors
    /// The queue is full, closed or ended, or the value is not queue data (nil anywhere is
    /// refused at the top; a resource handle anywhere): the error hands the value back.
    pub fn push(&self, value: impl Into<Message>) -> Result<(), PushError> {
        self.queue.push(value.into())
    }

    /// Takes the front value without waiting; `Ok(None)` when the queue is open and empty.
    ///
    /// # Errors
    /// [`PopError::Closed`] once closed and drained; [`PopError::Ended`] once the domain ended.
    pub fn try_pop(&self) -> Result<Option<Message>, PopError> {
        self.queue.try_pop()
    }

    /// Takes the front value, blocking this thread up to `timeout` for one to be pushed;
    /// `Ok(None)` when none came in time. Never call it on a domain's engine thread while that
    /// domain's scripts are the ones to push: the thread would wait for itself.
    ///
    /// # Errors
    /// [`PopError::Closed`] once closed and drained; [`PopError::Ended`] once the domain ended
    /// (also while waiting).
    pub fn pop_blocking(&self, timeout: Duration) -> Result<Option<Message>, PopError> {
        pop_blocking(&self.queue, timeout)
    }

    /// Closes the queue: later pushes are refused, pops drain what is left and then answer
    /// [`PopError::Closed`] (nil in Luau). Answers false if it was closed already.
    ///
    /// # Errors
    /// [`PopError::Ended`] once the domain ended.
    pub fn close(&self) -> Result<bool, PopError> {
        self.queue.close()
    }
}

/// Blocks the calling thread up to `timeout` for the front value of `queue`.
///
/// The waiter's callback fills a slot and unparks this thread. When the time is up, the waiter
/// is withdrawn; if a push took it first, its value is moments away (the pusher calls the
/// callback right after releasing the queue's lock), so the pop waits for it and keeps it
/// rather than leave it in flight.
pub fn pop_blocking(queue: &SharedQueue, timeout: Duration) -> Result<Option<Message>, PopError> {
    let deadline = Instant::now().checked_add(timeout);
    let slot = Arc::new(BlockedPop {
        delivery: Mutex::new(None),
        thread: thread::current(),
    });
    let to = slot.clone();
    let deliver = Box::new(move |delivery: Delivery| {
        *to.delivery.lock().unwrap_or_else(|e| e.into_inner()) = Some(delivery);
        to.thread.unpark();
    });
    let id = match queue.pop_or_wait(deliver)? {
        PopNow::Value(value) => return Ok(Some(value)),
        PopNow::Closed => return Err(PopError::Closed),
        PopNow::Waiting(id) => id,
    };
    let mut timed_out = false;
    loop {
        let taken = slot
            .delivery
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(delivery) = taken {
            return match delivery {
                Delivery::Value(value) => {
                    queue.delivered();
                    Ok(Some(value))
                }
                Delivery::Closed => Err(PopError::Closed),
                Delivery::Ended(reason) => Err(PopError::Ended(reason)),
            };
        }
        if !timed_out && deadline.is_some_and(|at| Instant::now() >= at) {
            if queue.cancel_wait(id) {
                return Ok(None);
            }
            timed_out = true;
        }
        park_until(if timed_out { None } else { deadline });
    }
}
