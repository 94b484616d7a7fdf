//! A multi-producer queue with one consumer thread that takes everything queued at once and
//! parks while there is nothing: the transport of a domain's mailbox (worker replies, reports,
//! forwarded queries) to its engine thread.
//!
//! Generic over what it carries, with no Luau in it, so the loom model in
//! `loom-tests/tests/wake_queue.rs` runs this code.
//!
//! # Protocol
//!
//! One mutex guards the queued values (a `Vec`), the consumer's `sleeping` flag, its thread
//! handle, whether the receiver is gone and how many senders are left. A send pushes, and in
//! the same critical section takes the `sleeping` flag: only the send that finds the consumer
//! asleep wakes it (an unpark, after the lock is let go), and every later send until the
//! consumer sleeps again costs a lock, a push and an unlock. The consumer swaps the whole `Vec`
//! for an empty one of its own, so a drain takes every value that arrived with one lock, and in
//! the steady state nothing is allocated: the two `Vec`s trade places and keep their capacity.
//!
//! The consumer decides to sleep in the critical section that found the queue empty, and a
//! sender decides to wake in the critical section that pushed, so a wake cannot be lost: either
//! the push comes first (the consumer sees it and does not park) or the `sleeping` flag does
//! (the sender sees it and unparks). An unpark that lands before the park leaves a token, so
//! the park returns at once; a token left over when the consumer woke on its own (a timeout)
//! costs it one spurious round later.
//!
//! Before it announces sleep the consumer re-checks for a number of short rounds (`executor::spin`'s
//! pauses, then yields): a reply to a short job lands within microseconds, sooner than a park
//! and an unpark, and a send in those rounds finds nobody to wake. Without
//! them a `dispatch(...):await()` round trip measured 29 µs at p50 on this machine, 2.4 µs with
//! them (`cargo bench --bench latency`); the `crossbeam-channel` this replaced spun the same way.
//!
//! A lock, not a lock-free list: the values are large (a domain event is about a hundred bytes)
//! and come in bursts, and a `Vec` that is swapped whole costs no allocation per value, where a
//! linked list (a Treiber stack taken with one atomic swap) allocates a node per value and
//! reverses the list on each take, and a segmented queue (crossbeam's `SegQueue`, or the
//! `crossbeam-channel` list this replaced) pays an atomic claim per value on each side and
//! zeroes and frees a block every 31 values. The critical sections are a few instructions long
//! and never run user code: values are dropped and handled outside the lock.
//!
//! # Disconnection
//!
//! As with a channel, a send after the receiver is gone fails and hands its value back, and the
//! values queued when the receiver drops are dropped with it (a held reply rejects its promise
//! in its own `Drop`). The receiver learns that every sender is gone from [`take_into`]'s
//! answer, once nothing is left queued.
//!
//! [`take_into`]: WakeReceiver::take_into

use std::cell::Cell;
use std::fmt;
use std::time::Instant;

use super::spin::{spin, SPIN_ROUNDS};
use crate::sync::{park_until, thread, Arc, Mutex, MutexGuard};

/// Rounds the consumer re-checks before it parks: the executor's [`SPIN_ROUNDS`], then yields up to
/// this many in all. A worker's spin rounds alone are too few here: with them, a forwarded query
/// answered by an engine thread waiting in `eval` costs about 44 µs a call (p50 51 µs: the engine
/// parks between the answer and the worker's next query); with 96 rounds, 3.3 µs (p50 2.3 µs),
/// as with the host spinning frames (`cargo bench --bench services`). Loom keeps one round, as
/// for the executor.
#[cfg(not(loom))]
const CONSUMER_ROUNDS: u32 = 96;
#[cfg(loom)]
const CONSUMER_ROUNDS: u32 = 1;

/// What the mutex guards.
struct State<T> {
    /// Values in the order they were sent.
    queued: Vec<T>,
    /// The consumer found the queue empty and parks (or is about to): the next send wakes it.
    sleeping: bool,
    /// The consumer's thread, recorded the first time it waits.
    consumer: Option<thread::Thread>,
    /// The receiver is gone: sends fail.
    closed: bool,
    /// Live senders; when none is left and nothing is queued, the receiver is disconnected.
    senders: usize,
}

struct Shared<T> {
    state: Mutex<State<T>>,
}

impl<T> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The sending end: any thread may hold one and clone it.
pub struct WakeSender<T> {
    shared: Arc<Shared<T>>,
}

/// The receiving end, held by the one consumer thread.
pub struct WakeReceiver<T> {
    shared: Arc<Shared<T>>,
    /// The buffer [`drain`](Self::drain) trades with the queue's, kept between drains.
    spare: Cell<Vec<T>>,
}

/// The most values a kept buffer has room for after a drain: a burst does not hold its memory.
const KEEP_CAPACITY: usize = 4096;

/// How a [`WakeReceiver::wait_until`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited {
    /// Something was queued (or every sender was gone) before the consumer had to park.
    Ready,
    /// The consumer parked, and a send woke it: something is queued.
    Woken,
    /// The deadline passed with nothing queued.
    TimedOut,
}

/// A new queue: its first sender and its receiver.
pub fn wake_queue<T>() -> (WakeSender<T>, WakeReceiver<T>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            queued: Vec::new(),
            sleeping: false,
            consumer: None,
            closed: false,
            senders: 1,
        }),
    });
    (
        WakeSender {
            shared: shared.clone(),
        },
        WakeReceiver {
            shared,
            spare: Cell::new(Vec::new()),
        },
    )
}

impl<T> WakeSender<T> {
    /// Queues `value`, waking the consumer if it sleeps; hands the value back when the receiver
    /// is gone.
    pub fn send(&self, value: T) -> Result<(), T> {
        let waking = {
            let mut state = self.shared.lock();
            if state.closed {
                return Err(value);
            }
            // The mutant decides whether to wake in a critical section of its own, before the
            // push: the consumer may find the queue empty and sleep in between
            // (loom-tests/README.md).
            #[cfg(loom_mutant = "wake_queue_wake_before_push")]
            let waking = {
                let waking = wake_decision(&mut state);
                drop(state);
                state = self.shared.lock();
                waking
            };
            state.queued.push(value);
            #[cfg(not(loom_mutant = "wake_queue_wake_before_push"))]
            let waking = wake_decision(&mut state);
            waking
        };
        if let Some(consumer) = waking {
            consumer.unpark();
        }
        Ok(())
    }
}

/// Takes the consumer's `sleeping` flag: the thread to unpark once the lock is let go, when it
/// slept.
fn wake_decision<T>(state: &mut State<T>) -> Option<thread::Thread> {
    if std::mem::take(&mut state.sleeping) {
        state.consumer.clone()
    } else {
        None
    }
}

impl<T> Clone for WakeSender<T> {
    fn clone(&self) -> Self {
        self.shared.lock().senders += 1;
        WakeSender {
            shared: self.shared.clone(),
        }
    }
}

impl<T> Drop for WakeSender<T> {
    fn drop(&mut self) {
        let waking = {
            let mut state = self.shared.lock();
            state.senders -= 1;
            // The last sender going wakes a consumer waiting for it, as a channel's
            // disconnection does.
            if state.senders == 0 {
                wake_decision(&mut state)
            } else {
                None
            }
        };
        if let Some(consumer) = waking {
            consumer.unpark();
        }
    }
}

impl<T> WakeReceiver<T> {
    /// Moves every queued value, in the order sent, to the end of `into`, which should be empty
    /// so that its buffer and the queue's trade places without a copy. Answers whether a sender
    /// is left: when none is, nothing will ever be queued again.
    pub fn take_into(&self, into: &mut Vec<T>) -> bool {
        let mut state = self.shared.lock();
        if into.is_empty() {
            std::mem::swap(&mut state.queued, into);
        } else {
            into.append(&mut state.queued);
        }
        state.senders > 0
    }

    /// Hands every value queued to `each`, in the order sent, until a take finds nothing (so
    /// what arrives meanwhile is handled too); answers how many it handled. `each` may drain
    /// again (it then works on a buffer of its own).
    pub fn drain(&self, mut each: impl FnMut(T)) -> usize {
        let mut batch = self.spare.take();
        let mut handled = 0;
        loop {
            self.take_into(&mut batch);
            if batch.is_empty() {
                break;
            }
            handled += batch.len();
            for value in batch.drain(..) {
                each(value);
            }
        }
        batch.shrink_to(KEEP_CAPACITY);
        self.spare.set(batch);
        handled
    }

    /// Every queued value, in the order sent.
    pub fn take_all(&self) -> Vec<T> {
        let mut taken = Vec::new();
        self.take_into(&mut taken);
        taken
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.shared.lock().queued.is_empty()
    }

    /// Parks the calling thread (the consumer) until something is queued, every sender is
    /// gone, or `deadline` passes. Answers at once when something is queued already.
    pub fn wait_until(&self, deadline: Option<Instant>) -> Waited {
        self.wait_after(CONSUMER_ROUNDS, deadline)
    }

    /// [`wait_until`](Self::wait_until) without the rounds of re-checking: it parks as soon as
    /// it finds nothing queued. For a consumer whose producers are busy on every core and send
    /// milliseconds apart (a frame waiting on its parallel work): there a re-check rarely finds
    /// anything, a pause spends the consumer's time for nothing, and a yield hands a worker's
    /// core to the re-check or leaves the consumer behind a worker's time slice.
    pub fn park_until(&self, deadline: Option<Instant>) -> Waited {
        self.wait_after(0, deadline)
    }

    /// Re-checks for `rounds` rounds, then parks as [`wait_until`](Self::wait_until) says.
    fn wait_after(&self, rounds: u32, deadline: Option<Instant>) -> Waited {
        // Rounds of re-checking first (the executor's spin rounds, then yields): a reply to a short
        // job lands within microseconds, sooner than a park and an unpark. The consumer has not
        // announced sleep here, so a send in these rounds needs no wake.
        for round in 1..=rounds {
            {
                let state = self.shared.lock();
                if !state.queued.is_empty() || state.senders == 0 {
                    return Waited::Ready;
                }
            }
            if deadline.is_some_and(|at| Instant::now() >= at) {
                break;
            }
            spin(round.min(SPIN_ROUNDS));
        }
        let mut parked = false;
        loop {
            {
                let mut state = self.shared.lock();
                if !state.queued.is_empty() || state.senders == 0 {
                    state.sleeping = false;
                    return if parked { Waited::Woken } else { Waited::Ready };
                }
                if deadline.is_some_and(|at| Instant::now() >= at) {
                    state.sleeping = false;
                    return Waited::TimedOut;
                }
                if state.consumer.is_none() {
                    state.consumer = Some(thread::current());
                }
                // Announced in the critical section that found the queue empty: a send after
                // this sees it and wakes the consumer.
                state.sleeping = true;
            }
            park_until(deadline);
            parked = true;
        }
    }
}

impl<T> Drop for WakeReceiver<T> {
    fn drop(&mut self) {
        let dropped = {
            let mut state = self.shared.lock();
            state.closed = true;
            std::mem::take(&mut state.queued)
        };
        // Outside the lock: a value's own `Drop` may send (to this queue, which refuses it).
        drop(dropped);
    }
}

impl<T> fmt::Debug for WakeSender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WakeSender").finish_non_exhaustive()
    }
}

impl<T> fmt::Debug for WakeReceiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WakeReceiver").finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Barrier;
    use std::time::Duration;

    #[test]
    fn values_come_out_in_order_and_a_send_after_the_receiver_is_gone_comes_back() {
        let (tx, rx) = wake_queue();
        for i in 0..5 {
            tx.send(i).unwrap();
        }
        let mut batch = Vec::new();
        assert!(rx.take_into(&mut batch));
        assert_eq!(batch, [0, 1, 2, 3, 4]);
        assert!(rx.is_empty());
        drop(rx);
        assert_eq!(tx.send(9), Err(9));
    }

    #[test]
    fn the_receiver_learns_every_sender_is_gone_once_it_took_what_they_sent() {
        let (tx, rx) = wake_queue();
        let other = tx.clone();
        tx.send(1).unwrap();
        drop(tx);
        other.send(2).unwrap();
        drop(other);
        assert_eq!(rx.wait_until(None), Waited::Ready);
        let mut batch = Vec::new();
        assert!(!rx.take_into(&mut batch));
        assert_eq!(batch, [1, 2]);
    }

    #[test]
    fn values_queued_when_the_receiver_drops_are_dropped_with_it() {
        let (tx, rx) = wake_queue();
        let value = Arc::new(());
        tx.send(value.clone()).unwrap();
        assert_eq!(Arc::strong_count(&value), 2);
        drop(rx);
        assert_eq!(Arc::strong_count(&value), 1);
    }

    #[test]
    fn a_wait_with_nothing_sent_times_out_at_its_deadline() {
        let (_tx, rx) = wake_queue::<u32>();
        let at = Instant::now() + Duration::from_millis(20);
        assert_eq!(rx.wait_until(Some(at)), Waited::TimedOut);
        assert!(Instant::now() >= at);
    }

    #[test]
    fn a_send_while_the_consumer_is_parked_wakes_it_long_before_its_deadline() {
        let (tx, rx) = wake_queue::<u32>();
        // The sender waits for the consumer's announcement, not for a time: the value then
        // reaches a consumer that parks (or is about to), and only the send can wake it.
        let sender = {
            let shared = rx.shared.clone();
            std::thread::spawn(move || {
                while !shared.lock().sleeping {
                    std::thread::yield_now();
                }
                tx.send(1).unwrap();
            })
        };
        let start = Instant::now();
        let waited = rx.wait_until(Some(start + Duration::from_secs(30)));
        assert_eq!(waited, Waited::Woken);
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{:?}",
            start.elapsed()
        );
        assert_eq!(rx.take_all(), [1]);
        sender.join().unwrap();
    }

    #[test]
    fn two_senders_stampede_and_every_value_arrives_once_in_each_senders_order() {
        const EACH: u64 = 20_000;
        let (tx, rx) = wake_queue::<(u64, u64)>();
        let start = Arc::new(Barrier::new(3));
        let senders: Vec<_> = (0..2)
            .map(|who| {
                let tx = tx.clone();
                let start = start.clone();
                std::thread::spawn(move || {
                    start.wait();
                    for i in 0..EACH {
                        tx.send((who, i)).unwrap();
                    }
                })
            })
            .collect();
        drop(tx);
        start.wait();
        let mut next = [0u64; 2];
        let (mut batch, mut batches) = (Vec::new(), 0);
        loop {
            rx.wait_until(None);
            let connected = rx.take_into(&mut batch);
            batches += usize::from(!batch.is_empty());
            for (who, i) in batch.drain(..) {
                assert_eq!(i, next[who as usize], "sender {who} out of order");
                next[who as usize] += 1;
            }
            if !connected {
                break;
            }
        }
        for sender in senders {
            sender.join().unwrap();
        }
        assert_eq!(next, [EACH, EACH]);
        assert!(batches >= 1 && batches <= 2 * EACH as usize, "{batches}");
    }
}
