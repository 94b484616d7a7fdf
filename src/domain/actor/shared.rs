//! The part of one worker that both of its threads see: its replies on their way to the
//! domain, its final state, and the domain tasks parked waiting for either.
//!
//! # Lost wakeups
//!
//! A domain task that finds nothing to receive parks on a promise and leaves its id here. The
//! check ("nothing waiting, still running") and the parking happen under the same lock the
//! worker takes to add a reply or to end, and the worker takes the parked ids under that lock
//! too: so a reply or an end either comes before the check (the task sees it and does not
//! park) or after the park (the worker settles the promise). Nothing falls between.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;

use super::error::WorkerError;
use crate::jobs::{DomainEvent, DomainMailbox};
use crate::value::Message;
use crate::vm::{Outcome, PromiseId};

/// How many messages may wait, each way: for the handler, and (sent with `worker.send`) for
/// the domain.
pub(crate) const MAX_WAITING: usize = 1024;

/// How many `@skein/worker` threads one domain may have alive at once, over all its
/// generations: 64. Each is an OS thread with its own VM, so the count is bounded before one is
/// started; a worker that ended (joined, closed and drained, failed) gives its place back.
pub const MAX_LIVE_WORKERS: usize = 64;

/// The worker runs (or has not ended yet).
pub(crate) const RUNNING: u8 = 0;
/// The worker ended after its queue closed, or was torn down with its domain.
pub(crate) const STOPPED: u8 = 1;
/// The worker ended on a failure.
pub(crate) const FAILED: u8 = 2;

/// One message on its way to the worker's handler.
pub(crate) struct Queued {
    pub(crate) message: Message,
    /// When it was sent, for the handler call's queue delay; stamped only when the domain is
    /// profiled (the clock read is the cost of a send otherwise).
    pub(crate) sent: Option<std::time::Instant>,
}

/// One thing the worker said to the domain.
pub(crate) enum Reply {
    /// A handler's return value, or a `worker.send` (`progress`).
    Value { message: Message, progress: bool },
    /// A failure, read once by `Worker:receive`.
    Failed(WorkerError),
}

#[derive(Default)]
struct Outbox {
    replies: VecDeque<Reply>,
    /// How many of `replies` came from `worker.send`: those are bounded.
    progress: usize,
    /// Promises of domain tasks waiting for a reply or the end.
    waiters: Vec<PromiseId>,
}

/// What the engine thread and the worker's own thread share of one worker.
pub(crate) struct ActorShared {
    pub(crate) name: String,
    state: AtomicU8,
    /// The budget signal of the worker's thread, so a teardown can interrupt a running handler.
    signal: std::sync::OnceLock<std::sync::Arc<crate::vm::Signal>>,
    outbox: Mutex<Outbox>,
    mailbox: DomainMailbox,
}

impl ActorShared {
    pub(crate) fn new(name: String, mailbox: DomainMailbox) -> ActorShared {
        ActorShared {
            name,
            state: AtomicU8::new(RUNNING),
            signal: std::sync::OnceLock::new(),
            outbox: Mutex::default(),
            mailbox,
        }
    }

    /// The mailbox of the generation that spawned the worker.
    pub(crate) fn mailbox(&self) -> &DomainMailbox {
        &self.mailbox
    }

    fn outbox(&self) -> std::sync::MutexGuard<'_, Outbox> {
        self.outbox.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Called on the worker's thread before it runs any Luau.
    pub(crate) fn set_signal(&self, signal: std::sync::Arc<crate::vm::Signal>) {
        let _ = self.signal.set(signal);
    }

    /// Interrupts the handler running now, if any; its cancel token must already be set.
    pub(crate) fn interrupt(&self) {
        if let Some(signal) = self.signal.get() {
            signal.request_cancel();
        }
    }

    /// The worker's state: [`RUNNING`], [`STOPPED`] or [`FAILED`].
    pub(crate) fn state(&self) -> u8 {
        self.state.load(Ordering::Acquire)
    }

    /// Adds a handler's reply or a failure (never refused: one per message at most).
    pub(crate) fn reply(&self, reply: Reply) {
        let waiters = {
            let mut outbox = self.outbox();
            outbox.replies.push_back(reply);
            std::mem::take(&mut outbox.waiters)
        };
        self.wake(waiters);
    }

    /// Adds a `worker.send` message; hands it back when [`MAX_WAITING`] already wait.
    pub(crate) fn progress(&self, message: Message) -> Result<(), Message> {
        let waiters = {
            let mut outbox = self.outbox();
            if outbox.progress >= MAX_WAITING {
                return Err(message);
            }
            outbox.progress += 1;
            outbox.replies.push_back(Reply::Value {
                message,
                progress: true,
            });
            std::mem::take(&mut outbox.waiters)
        };
        self.wake(waiters);
        Ok(())
    }

    /// Takes the oldest reply.
    pub(crate) fn take(&self) -> Option<Reply> {
        let mut outbox = self.outbox();
        let reply = outbox.replies.pop_front()?;
        if let Reply::Value { progress: true, .. } = reply {
            outbox.progress -= 1;
        }
        Some(reply)
    }

    /// Parks `promise` unless there is something to see now: a reply (unless `end_only`) or
    /// the end. Answers whether it parked.
    pub(crate) fn park(&self, promise: PromiseId, end_only: bool) -> bool {
        let mut outbox = self.outbox();
        if self.state() != RUNNING || (!end_only && !outbox.replies.is_empty()) {
            return false;
        }
        outbox.waiters.push(promise);
        true
    }

    /// The worker has ended in `state`.
    pub(crate) fn finish(&self, state: u8) {
        let waiters = {
            let mut outbox = self.outbox();
            self.state.store(state, Ordering::Release);
            std::mem::take(&mut outbox.waiters)
        };
        self.wake(waiters);
    }

    /// Settles the parked promises; each task looks again when it resumes.
    fn wake(&self, waiters: Vec<PromiseId>) {
        for promise in waiters {
            self.mailbox.send(DomainEvent::Settle {
                promise,
                outcome: Outcome::Resolved(Message::Nil),
            });
        }
    }

    /// Reports a line to the domain's reports, as a task that failed unawaited would be.
    pub(crate) fn report(&self, label: String, failure: String) {
        self.mailbox.send(DomainEvent::Report { label, failure });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::event_queue::EventQueue;
    use crate::domain::EventLimits;
    use crate::jobs::Generation;

    fn test_mailbox() -> (DomainMailbox, crossbeam_channel::Receiver<DomainEvent>) {
        let generation = Generation(1);
        DomainMailbox::new(
            EventQueue::new(EventLimits::default(), generation),
            generation,
        )
    }

    fn settled(rx: &crossbeam_channel::Receiver<DomainEvent>) -> Vec<PromiseId> {
        rx.try_iter()
            .filter_map(|event| match event {
                DomainEvent::Settle { promise, .. } => Some(promise),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_parked_receive_is_woken_by_the_next_reply_and_not_parked_while_one_waits() {
        let (mailbox, rx) = test_mailbox();
        let shared = ActorShared::new("w".to_owned(), mailbox);
        assert!(shared.park(7, false));
        assert!(settled(&rx).is_empty());
        shared.reply(Reply::Value {
            message: Message::Integer(1),
            progress: false,
        });
        assert_eq!(settled(&rx), vec![7]);
        // A reply waits: a receive looks again instead of parking; a join still parks.
        assert!(!shared.park(8, false));
        assert!(shared.park(9, true));
        assert!(matches!(
            shared.take(),
            Some(Reply::Value {
                message: Message::Integer(1),
                ..
            })
        ));
        assert!(shared.take().is_none());
        shared.finish(STOPPED);
        assert_eq!(settled(&rx), vec![9]);
        assert_eq!(shared.state(), STOPPED);
        assert!(!shared.park(10, true));
    }

    #[test]
    fn progress_is_bounded_and_replies_are_not() {
        let (mailbox, _rx) = test_mailbox();
        let shared = ActorShared::new("w".to_owned(), mailbox);
        for i in 0..MAX_WAITING {
            assert!(shared.progress(Message::Integer(i as i64)).is_ok());
        }
        assert_eq!(
            shared.progress(Message::Integer(-1)).unwrap_err(),
            Message::Integer(-1)
        );
        shared.reply(Reply::Value {
            message: Message::Nil,
            progress: false,
        });
        // Taking one progress message makes room for exactly one more.
        assert!(shared.take().is_some());
        assert!(shared.progress(Message::Integer(0)).is_ok());
        assert!(shared.progress(Message::Integer(0)).is_err());
    }
}
