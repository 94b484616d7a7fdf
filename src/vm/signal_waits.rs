//! The waiter lists of signal waits (`events.wait`, `engine.wait`): per signal, the tasks parked
//! on it in arrival order, each with the epoch of its park.
//!
//! The lists only hold ids; whether a task is still parked on its signal is the scheduler's
//! (`scheduler.rs`), which checks the epoch before it resumes anyone. A waiter is taken off its
//! list when it is released, when its timeout fires, or when its task is cancelled or ends, so
//! a list never holds a task that nothing will resume, and a release after a timeout finds
//! nothing of the removed waiter.

use std::collections::VecDeque;
use std::sync::Arc;

use rustc_hash::FxHashMap as HashMap;

use super::scheduler::TaskId;

/// The most tasks of one VM that may wait on signals at once: 1,024. A wait past it is refused.
pub(crate) const MAX_SIGNAL_WAITERS: usize = 1_024;

/// Which signals a wait is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum SignalKind {
    /// The domain's named events (`@skein/events`), or an actor's own.
    Event,
    /// Engine events the host raises (`engine.on`'s).
    Engine,
}

impl SignalKind {
    /// The call that waits on this kind, as errors name it.
    pub(crate) fn call(self) -> &'static str {
        match self {
            SignalKind::Event => "events.wait",
            SignalKind::Engine => "engine.wait",
        }
    }
}

/// One parked waiter: its task, the epoch of its park, and the first engine-event sequence
/// number it may take (0 for domain events, which are taken in delivery order).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Waiter {
    pub(crate) task: TaskId,
    pub(crate) epoch: u64,
    pub(crate) since: u64,
}

/// The signal waits of one VM.
#[derive(Default)]
pub(crate) struct SignalWaits {
    lists: HashMap<(SignalKind, Arc<str>), VecDeque<Waiter>>,
    count: usize,
}

impl SignalWaits {
    /// How many tasks wait on signals.
    pub(crate) fn len(&self) -> usize {
        self.count
    }

    /// Whether any task waits on a signal of `kind`.
    pub(crate) fn any_of(&self, kind: SignalKind) -> bool {
        self.count > 0 && self.lists.keys().any(|(k, _)| *k == kind)
    }

    /// The smallest `since` of the waiters of `kind`, if any wait.
    pub(crate) fn earliest_since(&self, kind: SignalKind) -> Option<u64> {
        self.lists
            .iter()
            .filter(|((k, _), _)| *k == kind)
            .flat_map(|(_, list)| list.iter().map(|w| w.since))
            .min()
    }

    /// Adds a waiter at the end of its signal's list.
    pub(crate) fn push(&mut self, kind: SignalKind, name: &str, waiter: Waiter) {
        self.lists
            .entry((kind, Arc::from(name)))
            .or_default()
            .push_back(waiter);
        self.count += 1;
    }

    /// Takes the waiters of a signal that may take an event numbered `seq` off its list, in
    /// arrival order; the others stay.
    pub(crate) fn take(&mut self, kind: SignalKind, name: &str, seq: u64) -> Vec<Waiter> {
        let key = (kind, Arc::from(name));
        let Some(list) = self.lists.get_mut(&key) else {
            return Vec::new();
        };
        let (taken, kept): (Vec<Waiter>, Vec<Waiter>) =
            list.drain(..).partition(|w| w.since <= seq);
        self.count -= taken.len();
        if kept.is_empty() {
            self.lists.remove(&key);
        } else {
            *list = VecDeque::from(kept);
        }
        taken
    }

    /// Takes a task off whichever list holds it (its timeout fired, or it was cancelled).
    pub(crate) fn remove(&mut self, task: TaskId) {
        let mut emptied = None;
        for (key, list) in self.lists.iter_mut() {
            if let Some(i) = list.iter().position(|w| w.task == task) {
                list.remove(i);
                self.count -= 1;
                if list.is_empty() {
                    emptied = Some(key.clone());
                }
                break;
            }
        }
        if let Some(key) = emptied {
            self.lists.remove(&key);
        }
    }

    /// The signal a task waits on, for a stall report.
    pub(crate) fn signal_of(&self, task: TaskId) -> Option<(SignalKind, Arc<str>)> {
        self.lists
            .iter()
            .find(|(_, list)| list.iter().any(|w| w.task == task))
            .map(|(key, _)| key.clone())
    }
}
