//! Bounded shared queues: the core, with no Luau in it.
//!
//! A [`SharedQueue`] is a FIFO of [`Message`]s with a fixed capacity. It never drops a value: a
//! push past the capacity is refused and hands the value back. A pop that finds the queue empty
//! registers a *waiter*, a callback that the next push calls with the value, outside the lock.
//!
//! # The hand-off protocol
//!
//! A waiter's callback usually runs on another thread than the popper's (it posts the value to
//! the popper's home VM), so the value is *in flight* for a while, and the popper may be gone by
//! the time it arrives (its task cancelled, its VM dropped). The receiving side must then answer
//! for the value, exactly once:
//!
//! - [`SharedQueue::delivered`] when the popper took it, or
//! - [`SharedQueue::give_back`] when it could not: the value goes to the next waiter, or back to
//!   the front of the queue, where it was the oldest.
//!
//! A value in flight keeps its slot: `push` counts `items + in_flight` against the capacity, so
//! a give-back never makes the queue hold more than its capacity.
//!
//! Waiters exist only while the queue is empty (a push hands its value to a waiter before it
//! would queue it, and a pop takes a queued value before it would wait), so "the queue is empty
//! → register a waiter" and "a waiter exists → hand it the value" must be one step each. That
//! is why the state sits behind a mutex with short critical sections rather than in a lock-free
//! ring: see `docs/architecture.md`.
//!
//! # Bytes
//!
//! A queue is bounded in bytes too: what waits in it weighs at most [`MAX_QUEUE_BYTES`] (by
//! [`Message::queue_weight`]), and every queue of a store draws on the store's budget, which
//! its tables share. A value handed straight to a waiting pop never waits, so it weighs on
//! neither. A given-back value returns to the front whatever the bounds (it was held before and
//! must not be lost), so they may be passed by that one value until it is popped.
//!
//! The protocol is model-checked in `loom-tests/tests/shared_queue.rs`.

use std::collections::{HashMap, VecDeque};
use std::fmt;

use bytes::Bytes;

use super::queue_error::{PopError, PushError, PushErrorKind, QueueOpenError, QueueOpenErrorKind};
use crate::sync::{Arc, Mutex, MutexGuard};

/// Why a store ended: plain immutable text, shared by every message that names it.
pub type Reason = std::sync::Arc<str>;
use crate::ledger::Ledger;
use crate::value::{MapKey, Message};

/// The capacity a queue gets when none is asked for.
pub(crate) const DEFAULT_QUEUE_CAPACITY: usize = 1_024;
/// The largest capacity a queue may have.
pub(crate) const MAX_QUEUE_CAPACITY: usize = 65_536;
/// The most bytes (by [`Message::queue_weight`]) the values waiting in one queue may weigh
/// together: 64 MiB.
pub(crate) const MAX_QUEUE_BYTES: usize = 64 << 20;

/// Identifies a waiter within its queue.
pub type WaiterId = u64;

/// What a parked pop receives.
#[derive(Debug, PartialEq)]
pub enum Delivery {
    /// The front value. The receiver answers for it with `delivered` or `give_back`.
    Value(Message),
    /// The queue was closed and is empty: the pop answers nothing.
    Closed,
    /// The store ended: the pop is rejected with the reason.
    Ended(Reason),
}

/// How a waiter is told: called once, on the thread that pushed, closed or ended, outside the
/// queue's lock.
pub type Deliver = Box<dyn FnOnce(Delivery) + Send>;

struct Waiter {
    id: WaiterId,
    deliver: Deliver,
}

/// A value waiting in the queue, with the weight it holds of the bounds.
struct Queued {
    value: Message,
    weight: usize,
}

struct State {
    items: VecDeque<Queued>,
    /// What `items` weigh together.
    bytes: usize,
    waiters: VecDeque<Waiter>,
    /// Values handed to a waiter that its receiver has not answered for yet.
    in_flight: usize,
    next_waiter: WaiterId,
    closed: bool,
    ended: Option<Reason>,
}

/// What [`SharedQueue::pop_or_wait`] found.
#[derive(Debug, PartialEq)]
pub enum PopNow {
    /// The front value.
    Value(Message),
    /// Closed and empty.
    Closed,
    /// Empty: the waiter was registered under this id and will be called.
    Waiting(WaiterId),
}

/// One bounded FIFO of one store.
pub struct SharedQueue {
    name: Bytes,
    capacity: usize,
    /// The store's budget, which every queue and table of the store draws on.
    budget: Arc<Ledger>,
    state: Mutex<State>,
}

impl fmt::Debug for SharedQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedQueue")
            .field("name", &self.display_name())
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

impl SharedQueue {
    /// An empty, open queue with a store budget of its own of [`MAX_QUEUE_BYTES`]. `capacity`
    /// is in `1..=MAX_QUEUE_CAPACITY` (the callers check). For models and tests: a store's
    /// queues are made by `Queues` and share its budget.
    #[cfg(any(test, loom))]
    pub fn new(name: impl Into<Bytes>, capacity: usize) -> SharedQueue {
        Self::in_store(name, capacity, Arc::new(Ledger::new(MAX_QUEUE_BYTES)))
    }

    /// An empty, open queue drawing on a store's `budget`.
    pub(crate) fn in_store(
        name: impl Into<Bytes>,
        capacity: usize,
        budget: Arc<Ledger>,
    ) -> SharedQueue {
        SharedQueue {
            name: name.into(),
            capacity,
            budget,
            state: Mutex::new(State {
                bytes: 0,
                items: VecDeque::new(),
                waiters: VecDeque::new(),
                in_flight: 0,
                next_waiter: 0,
                closed: false,
                ended: None,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // No user code runs under the lock (deliveries run after it is released), so a poisoned
        // lock only means a panic in this module's own bookkeeping between two consistent states.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The queue's name as given.
    pub fn name(&self) -> &[u8] {
        &self.name
    }

    /// The name for messages (invalid UTF-8 replaced).
    pub fn display_name(&self) -> String {
        String::from_utf8_lossy(&self.name).into_owned()
    }

    /// The most values the queue holds (queued plus in flight to a popper).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Values waiting to be popped.
    pub fn len(&self) -> usize {
        self.lock().items.len()
    }

    /// Whether no value waits to be popped.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Slots taken: values queued plus values in flight to a popper; never above the capacity.
    #[cfg(any(test, loom))]
    pub fn held(&self) -> usize {
        let state = self.lock();
        state.items.len() + state.in_flight
    }

    /// Values handed to a popper and not yet answered for.
    #[cfg(any(test, loom))]
    pub fn in_flight(&self) -> usize {
        self.lock().in_flight
    }

    /// Poppers waiting.
    pub fn waiters(&self) -> usize {
        self.lock().waiters.len()
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Why the queue's store ended, if it has.
    pub fn ended(&self) -> Option<Reason> {
        self.lock().ended.clone()
    }

    /// Puts `value` at the back, or hands it to the first waiting popper.
    ///
    /// # Errors
    /// The queue is full, closed or ended, or `value` is nil: the value comes back in the error
    /// and nothing changed.
    pub fn push(&self, value: Message) -> Result<(), PushError> {
        let refuse = |kind, value| PushError::new(self, kind, value);
        let weight = match check_data(&value) {
            Ok(weight) => weight,
            Err(kind) => return Err(refuse(kind, value)),
        };
        let mut state = self.lock();
        if let Some(reason) = &state.ended {
            let kind = PushErrorKind::Ended(reason.clone());
            return Err(refuse(kind, value));
        }
        if state.closed {
            return Err(refuse(PushErrorKind::Closed, value));
        }
        if let Some(waiter) = state.waiters.pop_front() {
            state.in_flight += 1;
            drop(state);
            (waiter.deliver)(Delivery::Value(value));
            return Ok(());
        }
        if state.items.len() + state.in_flight >= self.capacity {
            return Err(refuse(PushErrorKind::Full, value));
        }
        let would = state.bytes.saturating_add(weight);
        if would > MAX_QUEUE_BYTES {
            return Err(refuse(PushErrorKind::TooManyBytes { would }, value));
        }
        if let Err(refused) = self.budget.reserve(weight) {
            let kind = if refused.above {
                PushErrorKind::HostMemory(refused.to_string())
            } else {
                PushErrorKind::StoreFull {
                    would: refused.would,
                    max: refused.max,
                }
            };
            return Err(refuse(kind, value));
        }
        state.bytes = would;
        state.items.push_back(Queued { value, weight });
        Ok(())
    }

    /// Takes the front value without waiting.
    ///
    /// # Errors
    /// `Ended` once the store ended; `Closed` once closed and drained. `Ok(None)`: open and empty.
    pub fn try_pop(&self) -> Result<Option<Message>, PopError> {
        let mut state = self.lock();
        if let Some(reason) = &state.ended {
            return Err(PopError::Ended(reason.clone()));
        }
        match state.items.pop_front() {
            Some(queued) => Ok(Some(self.leave(&mut state, queued))),
            None if state.closed => Err(PopError::Closed),
            None => Ok(None),
        }
    }

    /// Takes up to `max` values from the front without waiting.
    ///
    /// # Errors
    /// As [`try_pop`](Self::try_pop); a closed queue still drains before it answers `Closed`.
    pub fn try_pop_many(&self, max: usize) -> Result<Vec<Message>, PopError> {
        let mut state = self.lock();
        if let Some(reason) = &state.ended {
            return Err(PopError::Ended(reason.clone()));
        }
        let n = max.min(state.items.len());
        if n == 0 && state.closed {
            return Err(PopError::Closed);
        }
        let taken: Vec<Queued> = state.items.drain(..n).collect();
        Ok(taken
            .into_iter()
            .map(|queued| self.leave(&mut state, queued))
            .collect())
    }

    /// Takes the front value, or answers `Closed`, or registers `deliver` as a waiter that the
    /// next push (or close, or end) calls. The check and the registration are one step, so no
    /// push can slip between them and leave the waiter asleep beside a value.
    ///
    /// # Errors
    /// `Ended` once the store ended.
    pub fn pop_or_wait(&self, deliver: Deliver) -> Result<PopNow, PopError> {
        let mut state = self.lock();
        if let Some(reason) = &state.ended {
            return Err(PopError::Ended(reason.clone()));
        }
        if let Some(queued) = state.items.pop_front() {
            return Ok(PopNow::Value(self.leave(&mut state, queued)));
        }
        if state.closed {
            return Ok(PopNow::Closed);
        }
        // The mutant lets the lock go between the check and the registration
        // (loom-tests/README.md).
        #[cfg(loom_mutant = "queue_wait_unlocked")]
        let mut state = {
            drop(state);
            self.lock()
        };
        state.next_waiter += 1;
        let id = state.next_waiter;
        state.waiters.push_back(Waiter { id, deliver });
        Ok(PopNow::Waiting(id))
    }

    /// Removes a waiter that no longer wants a value. Answers true when it was still waiting
    /// (nothing will be delivered); false when a delivery was already made or is on its way, and
    /// its receiver must answer for it.
    pub fn cancel_wait(&self, id: WaiterId) -> bool {
        let mut state = self.lock();
        match state.waiters.iter().position(|w| w.id == id) {
            Some(at) => {
                let waiter = state.waiters.remove(at);
                drop(state);
                drop(waiter); // its callback may own things with their own drop: not under the lock
                true
            }
            None => false,
        }
    }

    /// The receiver of a delivered value took it: its slot is free again.
    pub fn delivered(&self) {
        let mut state = self.lock();
        debug_assert!(state.in_flight > 0, "a delivery answered for twice");
        state.in_flight = state.in_flight.saturating_sub(1);
    }

    /// The receiver of a delivered value could not take it (its popper is gone): the value goes
    /// to the next waiter or back to the front, keeping its place as the oldest. After the store
    /// ended the value is dropped, as everything the queue held was.
    pub fn give_back(&self, value: Message) {
        let mut state = self.lock();
        if state.ended.is_some() {
            state.in_flight = state.in_flight.saturating_sub(1);
            return;
        }
        if let Some(waiter) = state.waiters.pop_front() {
            // The slot passes from one popper to the next: `in_flight` stays.
            drop(state);
            (waiter.deliver)(Delivery::Value(value));
            return;
        }
        debug_assert!(state.in_flight > 0, "a delivery answered for twice");
        state.in_flight = state.in_flight.saturating_sub(1);
        let weight = value.queue_weight();
        self.budget.force(weight);
        state.bytes = state.bytes.saturating_add(weight);
        state.items.push_front(Queued { value, weight });
    }

    /// A value leaves the queue: its weight goes back to the queue's and the store's bounds.
    fn leave(&self, state: &mut State, queued: Queued) -> Message {
        state.bytes -= queued.weight;
        self.budget.release(queued.weight);
        queued.value
    }

    /// What the values waiting in the queue weigh together.
    #[cfg(any(test, loom))]
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    /// Closes the queue: later pushes are refused, pops drain what is left and then answer
    /// nothing, and every waiting pop answers nothing now. Answers false if it was closed already.
    pub fn close(&self) -> Result<bool, PopError> {
        let mut state = self.lock();
        if let Some(reason) = &state.ended {
            return Err(PopError::Ended(reason.clone()));
        }
        if state.closed {
            return Ok(false);
        }
        state.closed = true;
        let waiters = std::mem::take(&mut state.waiters);
        drop(state);
        for waiter in waiters {
            (waiter.deliver)(Delivery::Closed);
        }
        Ok(true)
    }

    /// The store ended: the values are dropped, every waiting pop is rejected with `reason`, and
    /// every later use refuses.
    pub fn end(&self, reason: &Reason) {
        let mut state = self.lock();
        if state.ended.is_some() {
            return;
        }
        state.ended = Some(reason.clone());
        let items = std::mem::take(&mut state.items);
        self.budget.release(std::mem::take(&mut state.bytes));
        let waiters = std::mem::take(&mut state.waiters);
        drop(state);
        drop(items);
        for waiter in waiters {
            (waiter.deliver)(Delivery::Ended(reason.clone()));
        }
    }
}

/// Every shared queue of one store, by name.
pub(crate) struct Queues {
    by_name: Mutex<NamedQueues>,
    budget: Arc<Ledger>,
}

/// The queues of one store by name, and why the store ended, once it has.
#[derive(Default)]
struct NamedQueues {
    queues: HashMap<Bytes, Arc<SharedQueue>>,
    ended: Option<Reason>,
}

impl Queues {
    /// No queues yet; each one made draws on `budget`, the store's.
    pub(crate) fn new(budget: Arc<Ledger>) -> Queues {
        Queues {
            by_name: Mutex::new(NamedQueues::default()),
            budget,
        }
    }

    /// The queue called `name`, made on first use with `capacity` (the default when `None`).
    /// Asking again with an explicit, different capacity is refused; asking with none takes the
    /// queue as it is. `reserve` takes one of the store's names for a new queue.
    pub(crate) fn get_or_make(
        &self,
        name: &[u8],
        capacity: Option<usize>,
        reserve: impl FnOnce() -> Result<(), String>,
        what: &str,
    ) -> Result<Arc<SharedQueue>, QueueOpenError> {
        if let Some(c) = capacity {
            check_capacity(c, what)
                .map_err(|e| QueueOpenError::new(QueueOpenErrorKind::BadCapacity, e))?;
        }
        let mut named = self.by_name.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(reason) = &named.ended {
            return Err(QueueOpenError::new(
                QueueOpenErrorKind::Ended,
                format!("{what}: the shared store has ended: {reason}"),
            ));
        }
        if let Some(queue) = named.queues.get(name) {
            return match capacity {
                Some(c) if c != queue.capacity => Err(QueueOpenError::new(
                    QueueOpenErrorKind::OtherCapacity,
                    format!(
                        "{what}: queue '{}' exists with capacity {}, not {c}",
                        queue.display_name(),
                        queue.capacity
                    ),
                )),
                _ => Ok(queue.clone()),
            };
        }
        reserve().map_err(|e| QueueOpenError::new(QueueOpenErrorKind::Limit, e))?;
        let name = Bytes::copy_from_slice(name);
        let queue = Arc::new(SharedQueue::in_store(
            name.clone(),
            capacity.unwrap_or(DEFAULT_QUEUE_CAPACITY),
            self.budget.clone(),
        ));
        named.queues.insert(name, queue.clone());
        Ok(queue)
    }

    /// Number of queues made.
    #[cfg(test)]
    pub(crate) fn count(&self) -> usize {
        self.by_name
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .queues
            .len()
    }

    /// The store ended: parked pops are rejected and pushes refused, naming `reason`.
    pub(crate) fn end(&self, reason: &str) {
        let reason: Reason = Reason::from(reason);
        let queues: Vec<Arc<SharedQueue>> = {
            let mut named = self.by_name.lock().unwrap_or_else(|e| e.into_inner());
            named.ended = Some(reason.clone());
            named.queues.values().cloned().collect()
        };
        for queue in queues {
            queue.end(&reason);
        }
    }
}

/// Checks that `value` is data a queue holds: not nil, and no resource handle anywhere in it
/// (a handle stands for a native object of one domain, not for data). Answers its weight, from
/// the same walk; only a refusal walks again, to name where the handle sits.
pub(crate) fn check_data(value: &Message) -> Result<usize, PushErrorKind> {
    if matches!(value, Message::Nil) {
        return Err(PushErrorKind::Nil);
    }
    value.data_weight().ok_or_else(|| resource_refusal(value))
}

/// The refusal of a value holding a resource handle, naming the handle's path.
#[cold]
fn resource_refusal(value: &Message) -> PushErrorKind {
    use crate::value::path::{render, Segment};
    fn walk(value: &Message, trail: &mut Vec<Segment>) -> bool {
        match value {
            Message::Resource(_) => false,
            Message::List(items) => items.iter().enumerate().all(|(i, item)| {
                let ok = walk(item, trail);
                if !ok {
                    trail.push(Segment::Index(i as i64 + 1));
                }
                ok
            }),
            Message::Map(entries) => entries.iter().all(|(key, item)| {
                let ok = walk(item, trail);
                if !ok {
                    trail.push(match key {
                        MapKey::Integer(i) => Segment::Index(*i),
                        MapKey::Number(n) => Segment::Number(*n),
                        MapKey::String(s) => Segment::Name(s.to_vec()),
                    });
                }
                ok
            }),
            _ => true,
        }
    }
    let mut trail = Vec::new();
    walk(value, &mut trail);
    PushErrorKind::NotData(format!(
        "{}: a resource handle can't be queued",
        render("value", &trail)
    ))
}

/// Checks a requested capacity: 1 to [`MAX_QUEUE_CAPACITY`].
pub(crate) fn check_capacity(capacity: usize, what: &str) -> Result<(), String> {
    if (1..=MAX_QUEUE_CAPACITY).contains(&capacity) {
        Ok(())
    } else {
        Err(format!(
            "{what}: capacity must be 1 to {MAX_QUEUE_CAPACITY}, got {capacity}"
        ))
    }
}

#[cfg(all(test, not(loom)))]
mod queue_tests;
