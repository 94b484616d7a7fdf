//! Keyed items (`opts.key`): from the pool's key lanes to the bound worker's inbox, and back.
//!
//! The lanes (`crate::executor::lanes`) decide what runs where and when; this file turns their
//! deliveries into worker messages, rejects superseded items, and settles a lane when an item's
//! turn ends. A keyed item reaches its worker only as [`WorkerMsg::RunKeyed`] in that worker's
//! inbox, which no sibling reads, so it is never stolen.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::item::{Item, LaneKey};
use super::messages::WorkerMsg;
use super::pool_shared::PoolShared;
use super::reply::reply;
use crate::executor::lanes::{Deliver, Release, TooManyKeys, MAX_KEYS};
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
                    module: Some(old.module().to_path_buf()),
                    entry: Some(old.entry().to_string()),
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
    /// in the key's [`KeyWait`](crate::executor::lanes::KeyWait).
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
