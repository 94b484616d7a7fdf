//! Keyed items (`opts.key`): from the pool's key lanes to the bound worker's inbox, and back.
//!
//! The lanes (`crate::pool::lanes`) decide what runs where and when; this file turns their
//! deliveries into worker messages, rejects superseded items, and settles a lane when an item's
//! turn ends. A keyed item reaches its worker only as [`WorkerMsg::RunKeyed`] in that worker's
//! inbox, which no sibling reads, so it is never stolen.

use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use foldhash::fast::RandomState;

use super::item::{Item, LaneKey};
use super::messages::WorkerMsg;
use super::pool_shared::PoolShared;
use super::reply::reply;
use crate::pool::lanes::{Deliver, Release, TooManyKeys, MAX_KEYS};
use crate::principal::Principal;
use crate::vm::{FailureKind, JobFailure, Outcome};

impl PoolShared {
    /// Queues `item` in its key's lane (binding the key if new); with `supersede`, rejects the
    /// key's items that have not started, naming `item`.
    ///
    /// # Errors
    ///
    /// The refusal text, starting with `option` (the call and the option that named the key),
    /// when the key is new and the pool holds [`MAX_KEYS`] keys.
    pub(crate) fn dispatch_keyed(
        &self,
        key: LaneKey,
        item: Item,
        supersede: bool,
        option: &str,
    ) -> Result<(), String> {
        let superseding = supersede.then(|| item.job.clone());
        let superseded = self
            .lanes
            .enqueue(&key, item, supersede, |d| self.deliver(d, &key))
            .map_err(|TooManyKeys(_)| {
                format!(
                    "{option}: the pool holds at most {MAX_KEYS} keys at once; \
                     release one (jobs.release) before dispatching with a new key"
                )
            })?;
        if let Some(by) = superseding {
            for old in superseded {
                // A canceller that got there first has settled the promise already.
                if !old.job.handoff.try_start() {
                    continue;
                }
                old.job.handoff.finish();
                let failure = JobFailure {
                    job: old.job.label(),
                    module: Some(old.module.to_path_buf()),
                    entry: Some(old.entry.to_string()),
                    kind: FailureKind::Refused,
                    message: format!("superseded by {by}"),
                    traceback: None,
                };
                reply(
                    &old.principal,
                    old.reply,
                    Outcome::Rejected(Arc::new(failure)),
                    self,
                );
            }
        }
        Ok(())
    }

    /// Ends a key's binding after the items dispatched before it; answers whether the pool held
    /// the key.
    pub(crate) fn release_key(&self, key: LaneKey) -> bool {
        let answer = self.lanes.release(&key, |d| self.deliver(d, &key));
        answer != Release::NotHeld
    }

    /// The turn of a keyed item ended: hand the lane on, counting the item's wait for its turn
    /// in the key's [`KeyWait`](crate::pool::lanes::KeyWait).
    fn settle_key(&self, key: &LaneKey, waited: Duration) {
        self.lanes
            .settle_waited(key, waited, |d| self.deliver(d, key));
    }

    /// Posts a lane's delivery to its worker. Runs under the lanes' lock (see its docs).
    fn deliver(&self, d: Deliver<Item>, key: &LaneKey) {
        match d {
            Deliver::Run { worker, item } => self.exec.post(worker, WorkerMsg::RunKeyed(item)),
            Deliver::Released { worker } => self.exec.post(
                worker,
                WorkerMsg::Released {
                    principal: key.0,
                    key: key.1.clone(),
                },
            ),
        }
    }
}

/// How many keys [`key_bytes`] keeps per thread; one more empties its cache first. Keys are at
/// most 256 bytes, so a thread keeps at most about 1 MiB of key bytes.
const KEPT_KEYS: usize = 4_096;

thread_local! {
    /// The keys this thread's dispatches named lately, shared: see [`key_bytes`].
    static KEPT: RefCell<HashSet<Bytes, RandomState>> = RefCell::new(HashSet::default());
}

/// The key of a keyed dispatch as [`Bytes`]: a key this thread named lately is the same
/// allocation again (one lookup and a reference count), not a new copy. A keyed item's key is
/// held by its job, its promise and its lane, and a fresh copy cost an allocation, another when
/// it was first shared, and their frees: about 800 instructions on every keyed dispatch.
pub(crate) fn key_bytes(key: &[u8]) -> Bytes {
    // A thread whose locals are being torn down (a VM dropped there) has no kept keys left:
    // it copies the key.
    KEPT.try_with(|kept| {
        let mut kept = kept.borrow_mut();
        if let Some(found) = kept.get(key) {
            return found.clone();
        }
        if kept.len() >= KEPT_KEYS {
            kept.clear();
        }
        let made = Bytes::copy_from_slice(key);
        kept.insert(made.clone());
        made
    })
    .unwrap_or_else(|_| Bytes::copy_from_slice(key))
}

/// A keyed item's turn in its lane. Dropping it settles the lane, so whichever way the item
/// ends (its root task returns and replies, it fails before starting, it is cancelled, or its VM
/// is dropped) the next item of the key is handed over exactly once. Whoever replies for the item
/// does so before dropping the turn.
pub(crate) struct LaneTurn {
    pool: Arc<PoolShared>,
    key: LaneKey,
    /// How long the item waited, from dispatch to start, for this turn.
    waited: Duration,
}

impl LaneTurn {
    pub(crate) fn new(
        pool: Arc<PoolShared>,
        principal: Principal,
        key: Bytes,
        waited: Duration,
    ) -> Self {
        LaneTurn {
            pool,
            key: (principal, key),
            waited,
        }
    }
}

impl Drop for LaneTurn {
    fn drop(&mut self) {
        self.pool.settle_key(&self.key, self.waited);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept_len() -> usize {
        KEPT.with(|kept| kept.borrow().len())
    }

    #[test]
    fn a_key_named_again_is_the_same_buffer_with_the_same_bytes() {
        let first = key_bytes(b"k1");
        let again = key_bytes(b"k1");
        assert_eq!(first, again);
        assert_eq!(first.as_ptr(), again.as_ptr(), "one buffer, shared");
        let other = key_bytes(b"k2");
        assert_eq!(&other[..], b"k2");
        assert_ne!(first.as_ptr(), other.as_ptr());
    }

    #[test]
    fn a_thread_keeps_at_most_kept_keys_and_empties_its_cache_one_past() {
        // Each test runs on its own thread: the cache starts empty here.
        for i in 0..KEPT_KEYS {
            key_bytes(format!("key{i}").as_bytes());
        }
        assert_eq!(kept_len(), KEPT_KEYS);
        // A key already kept is found without growing the cache.
        assert_eq!(&key_bytes(b"key0")[..], b"key0");
        assert_eq!(kept_len(), KEPT_KEYS);
        // One past: the cache is emptied, then keeps the new key alone.
        let past = key_bytes(b"one more");
        assert_eq!(&past[..], b"one more");
        assert_eq!(kept_len(), 1);
    }
}
