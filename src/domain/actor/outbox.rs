//! The part of one actor that both of its threads see: its replies on their way to the
//! domain, its final state, and the domain tasks parked waiting for either.
//!
//! # Observed failures
//!
//! A failure fails the run only if no code observed it: the domain's code observes one by
//! receiving it (`Worker:receive` raises it) or by joining the actor that ended on it (`join`
//! answers `"failed"`). So a failure is not reported when it happens; it waits in the outbox,
//! and is reported when it can no longer be observed: when the domain's run ends with it
//! unobserved ([`Unobserved::take`]), or when the actor's last handle is gone (its drop).
//!
//! # Lost wakeups
//!
//! A domain task that finds nothing to receive parks on a promise and leaves its id here. The
//! check ("nothing waiting, still running") and the parking happen under the same lock the
//! actor takes to add a reply or to end, and the actor takes the parked ids under that lock
//! too: so a reply or an end either comes before the check (the task sees it and does not
//! park) or after the park (the actor settles the promise). Nothing falls between.

use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Instant;

use super::error::ActorError;
use crate::domain::DomainMailbox;
use crate::jobs::DomainEvent;
use crate::ledger::{Charge, Ledger};
use crate::value::Message;
use crate::vm::{Outcome, PromiseId, Signal};

/// How many messages may wait, each way: for the handler, and (sent with `worker.send`) for
/// the domain.
pub(crate) const MAX_WAITING: usize = 1024;

/// How many `@skein/worker` threads one domain may have alive at once, over all its
/// generations: 64. Each is an OS thread with its own VM, so the count is bounded before one is
/// started; an actor that ended (joined, closed and drained, failed) gives its place back.
pub(crate) const MAX_LIVE_ACTORS: usize = 64;

/// How much the messages waiting for one actor's handler and for its domain (replies and
/// `worker.send` messages) may weigh together, by `Message::queue_weight`: 64 MiB.
pub(crate) const MAX_ACTOR_BYTES: usize = 64 << 20;

/// The actor runs (or has not ended yet).
pub(crate) const RUNNING: u8 = 0;
/// The actor ended after its queue closed, or was torn down with its domain.
pub(crate) const STOPPED: u8 = 1;
/// The actor ended on a failure.
pub(crate) const FAILED: u8 = 2;

/// One message on its way to the actor's handler.
pub(crate) struct Queued {
    pub(crate) message: Message,
    /// What it holds of the actor's [`MAX_ACTOR_BYTES`] until the lane built it in its VM.
    pub(crate) charge: Charge,
    /// When it was sent, for the handler call's queue delay; stamped only when the domain is
    /// profiled (the clock read is the cost of a send otherwise).
    pub(crate) sent: Option<Instant>,
}

/// One thing the actor said to the domain.
pub(crate) enum Reply {
    /// A handler's return value, or a `worker.send` (`progress`), with what it holds of the
    /// actor's [`MAX_ACTOR_BYTES`] until the domain takes it.
    Value {
        message: Message,
        progress: bool,
        charge: Charge,
    },
    /// A failure, read once by `Worker:receive`; `reported` once its report was made (it
    /// went unobserved to the end of a run).
    Failed { error: ActorError, reported: bool },
}

#[derive(Default)]
struct Outbox {
    replies: VecDeque<Reply>,
    /// How many of `replies` came from `worker.send`: those are bounded.
    progress: usize,
    /// Promises of domain tasks waiting for a reply or the end.
    waiters: Vec<PromiseId>,
}

/// What the engine thread and the actor's own thread share of one actor.
pub(crate) struct ActorShared {
    pub(crate) name: String,
    state: AtomicU8,
    /// The budget signal of the actor's thread, so a teardown can interrupt a running handler.
    signal: OnceLock<Arc<Signal>>,
    outbox: Mutex<Outbox>,
    mailbox: DomainMailbox,
    /// What the messages waiting each way hold together ([`MAX_ACTOR_BYTES`]).
    bytes: Arc<Ledger>,
    /// Set when a `join` answered `"failed"`: every failure of the actor was observed.
    joined_failed: AtomicBool,
    /// Set once the actor is in its domain's [`Unobserved`] list.
    listed: AtomicBool,
}

impl ActorShared {
    /// The shared part of actor `name`, whose messages are charged to `memory` too (its
    /// domain's host memory).
    pub(crate) fn new(name: String, mailbox: DomainMailbox, memory: Arc<Ledger>) -> ActorShared {
        ActorShared {
            name,
            state: AtomicU8::new(RUNNING),
            signal: OnceLock::new(),
            outbox: Mutex::default(),
            mailbox,
            bytes: Arc::new(Ledger::under(MAX_ACTOR_BYTES, Some(memory))),
            joined_failed: AtomicBool::new(false),
            listed: AtomicBool::new(false),
        }
    }

    /// Takes what `message` weighs of the actor's [`MAX_ACTOR_BYTES`], or answers the
    /// refusal's end (`would weigh N bytes, past the bound of M`) for the caller to begin.
    pub(crate) fn charge(&self, message: &Message) -> Result<Charge, String> {
        Charge::take(&self.bytes, message.queue_weight()).map_err(|refused| {
            refused.text(|would| {
                format!(
                    "the messages waiting for and from worker '{}' would weigh {would} bytes, \
                     past the bound of {MAX_ACTOR_BYTES}",
                    self.name
                )
            })
        })
    }

    /// The mailbox of the generation that spawned the actor.
    pub(crate) fn mailbox(&self) -> &DomainMailbox {
        &self.mailbox
    }

    fn outbox(&self) -> MutexGuard<'_, Outbox> {
        self.outbox.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Called on the actor's thread before it runs any Luau.
    pub(crate) fn set_signal(&self, signal: Arc<Signal>) {
        let _ = self.signal.set(signal);
    }

    /// Interrupts the handler running now, if any; its cancel token must already be set.
    pub(crate) fn interrupt(&self) {
        if let Some(signal) = self.signal.get() {
            signal.request_cancel();
        }
    }

    /// The actor's state: [`RUNNING`], [`STOPPED`] or [`FAILED`].
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

    /// Adds a `worker.send` message (its `charge` taken); hands it back when [`MAX_WAITING`]
    /// already wait.
    pub(crate) fn progress(&self, message: Message, charge: Charge) -> Result<(), Message> {
        let waiters = {
            let mut outbox = self.outbox();
            if outbox.progress >= MAX_WAITING {
                return Err(message);
            }
            outbox.progress += 1;
            outbox.replies.push_back(Reply::Value {
                message,
                progress: true,
                charge,
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

    /// The actor has ended in `state`.
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

    /// Hands a failure to the domain: the next `receive` raises it, and it is reported only if
    /// no code observes it (see the module's notes). `unobserved` is the domain's list.
    pub(crate) fn fail(self: &Arc<Self>, error: ActorError, unobserved: &Unobserved) {
        if !self.listed.swap(true, Ordering::AcqRel) {
            unobserved.add(self);
        }
        self.reply(Reply::Failed {
            error,
            reported: false,
        });
    }

    /// A `join` answered `"failed"`: the code that joined observed every failure.
    pub(crate) fn observe_end(&self) {
        self.joined_failed.store(true, Ordering::Release);
    }

    /// The failures no code observed and that were not reported yet, marked reported.
    fn take_unobserved(&self) -> Vec<ActorError> {
        if self.joined_failed.load(Ordering::Acquire) {
            return Vec::new();
        }
        let mut outbox = self.outbox();
        let mut unobserved = Vec::new();
        for reply in &mut outbox.replies {
            if let Reply::Failed {
                error,
                reported: reported @ false,
            } = reply
            {
                *reported = true;
                unobserved.push(error.clone());
            }
        }
        unobserved
    }

    /// The label an actor's failure is reported under.
    pub(crate) fn label(&self) -> String {
        format!("worker '{}'", self.name)
    }
}

impl Drop for ActorShared {
    /// No code can observe a failure once the actor's handles and thread are gone.
    fn drop(&mut self) {
        for error in self.take_unobserved() {
            self.report(self.label(), error.to_string());
        }
    }
}

/// The actors of one domain (every generation) that failed while a run of the domain may
/// still observe the failure: at most one entry per actor, and an entry goes when its actor
/// is gone or was swept after its end.
#[derive(Default)]
pub(crate) struct Unobserved(Mutex<Vec<Weak<ActorShared>>>);

impl Unobserved {
    fn add(&self, actor: &Arc<ActorShared>) {
        let mut list = self.0.lock().unwrap_or_else(|e| e.into_inner());
        list.retain(|actor| actor.strong_count() > 0);
        list.push(Arc::downgrade(actor));
    }

    /// The failures no code observed, as `(label, text)` reports, each once: called when a run
    /// of the domain ends, since no code is left that could observe them.
    pub(crate) fn take(&self) -> Vec<(String, String)> {
        let mut reports = Vec::new();
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|actor| {
                let Some(actor) = actor.upgrade() else {
                    return false;
                };
                let label = actor.label();
                reports.extend(
                    actor
                        .take_unobserved()
                        .into_iter()
                        .map(|error| (label.clone(), error.to_string())),
                );
                // A running actor may fail again.
                actor.state() == RUNNING
            });
        reports
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::MailboxReceiver;
    use crate::principal::event_queue::EventQueue;
    use crate::principal::EventLimits;
    use crate::principal::Generation;

    fn test_mailbox() -> (DomainMailbox, MailboxReceiver) {
        let generation = Generation(1);
        DomainMailbox::new(
            EventQueue::new(EventLimits::default(), generation),
            generation,
        )
    }

    fn settled(rx: &MailboxReceiver) -> Vec<PromiseId> {
        rx.take_all()
            .into_iter()
            .filter_map(|event| match event {
                DomainEvent::Settle { promise, .. } => Some(promise),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_parked_receive_is_woken_by_the_next_reply_and_not_parked_while_one_waits() {
        let (mailbox, rx) = test_mailbox();
        let shared = ActorShared::new("w".to_owned(), mailbox, Arc::new(Ledger::new(usize::MAX)));
        assert!(shared.park(7, false));
        assert!(settled(&rx).is_empty());
        let message = Message::Integer(1);
        let charge = shared.charge(&message).unwrap();
        shared.reply(Reply::Value {
            message,
            progress: false,
            charge,
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
        let shared = ActorShared::new("w".to_owned(), mailbox, Arc::new(Ledger::new(usize::MAX)));
        for i in 0..MAX_WAITING {
            assert!(shared
                .progress(
                    Message::Integer(i as i64),
                    shared.charge(&Message::Integer(i as i64)).unwrap()
                )
                .is_ok());
        }
        assert_eq!(
            shared
                .progress(
                    Message::Integer(-1),
                    shared.charge(&Message::Integer(-1)).unwrap()
                )
                .unwrap_err(),
            Message::Integer(-1)
        );
        let charge = shared.charge(&Message::Nil).unwrap();
        shared.reply(Reply::Value {
            message: Message::Nil,
            progress: false,
            charge,
        });
        // Taking one progress message makes room for exactly one more.
        assert!(shared.take().is_some());
        assert!(shared
            .progress(
                Message::Integer(0),
                shared.charge(&Message::Integer(0)).unwrap()
            )
            .is_ok());
        assert!(shared
            .progress(
                Message::Integer(0),
                shared.charge(&Message::Integer(0)).unwrap()
            )
            .is_err());
    }

    #[test]
    fn the_messages_waiting_each_way_share_one_byte_bound_and_taking_frees_it() {
        let (mailbox, _rx) = test_mailbox();
        let shared = ActorShared::new("w".to_owned(), mailbox, Arc::new(Ledger::new(usize::MAX)));
        let big = |bytes: usize| Message::String(vec![b'x'; bytes - 16].into());
        let half = big(MAX_ACTOR_BYTES / 2);
        let first = shared.charge(&half).unwrap();
        shared
            .progress(half.clone(), first)
            .expect("room for one message");
        let second = shared.charge(&half).unwrap();
        assert_eq!(shared.bytes.held(), MAX_ACTOR_BYTES);
        assert_eq!(
            shared.charge(&Message::Nil).unwrap_err(),
            format!(
                "the messages waiting for and from worker 'w' would weigh {} bytes, past the \
                 bound of {MAX_ACTOR_BYTES}",
                MAX_ACTOR_BYTES + 16
            )
        );
        drop(second);
        assert!(shared.take().is_some());
        assert_eq!(shared.bytes.held(), 0, "a taken message frees its bytes");
    }
}
