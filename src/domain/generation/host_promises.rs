//! The host promises of one domain generation that may still be pending, so a restart rejects
//! every one of them with its reason.
//!
//! A host [`Promise`](crate::Promise) settles through its item's reply, and a job that is still
//! running when its generation ends may yet reply with a value. A restart promises more: every
//! pending promise of the old generation rejects, naming the restart. The domain therefore
//! keeps a weak list of the slots it handed out and, on restart, settles each pending one; a
//! reply that still arrives later is ignored (a slot settles once). A stop does not use the
//! list: it lets running jobs settle as they end.

use std::sync::{Arc, Weak};

use crate::jobs::{HostSlot, JobShared, NOT_STARTED};
use crate::vm::{FailureKind, JobFailure, Outcome};

/// The fewest entries the list holds before it prunes settled slots.
const PRUNE_FLOOR: usize = 64;

/// Weak handles on the host slots of one generation.
pub(crate) struct HostPromises {
    slots: Vec<(Weak<HostSlot>, Arc<JobShared>)>,
    /// Prune when the list reaches this length: twice what survived the last prune, so the
    /// cost per dispatch stays constant.
    prune_at: usize,
}

impl Default for HostPromises {
    fn default() -> Self {
        HostPromises {
            slots: Vec::new(),
            prune_at: PRUNE_FLOOR,
        }
    }
}

impl HostPromises {
    /// Remembers a slot handed to the host.
    pub(crate) fn track(&mut self, slot: &Arc<HostSlot>, job: Arc<JobShared>) {
        if self.slots.len() >= self.prune_at {
            self.slots
                .retain(|(slot, _)| slot.upgrade().is_some_and(|s| s.is_pending()));
            self.prune_at = (self.slots.len() * 2).max(PRUNE_FLOOR);
        }
        self.slots.push((Arc::downgrade(slot), job));
    }

    /// Rejects every slot still pending with `reason`: a job that had not started was refused
    /// unrun, one that had started ended with its generation. Empties the list.
    pub(crate) fn reject_all(&mut self, reason: &str) {
        for (slot, job) in self.slots.drain(..) {
            let Some(slot) = slot.upgrade() else { continue };
            let started = job.worker.load(std::sync::atomic::Ordering::Acquire) != NOT_STARTED;
            let failure = JobFailure {
                job: job.label(),
                module: None,
                entry: None,
                kind: if started {
                    FailureKind::Ended
                } else {
                    FailureKind::Refused
                },
                message: reason.to_owned(),
                traceback: None,
            };
            slot.settle(Outcome::Rejected(Arc::new(failure)));
        }
        self.prune_at = PRUNE_FLOOR;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::{Pool, Promise};
    use crate::principal::{DomainId, Generation, Principal};
    use crate::Error;

    fn job(pool: &Pool) -> Arc<JobShared> {
        let principal = Principal {
            domain: DomainId(1),
            generation: Generation(1),
        };
        JobShared::new(
            None,
            Arc::from("./m"),
            Arc::from("run"),
            pool.shared().clone(),
            principal,
            None,
        )
    }

    #[test]
    fn settled_slots_are_pruned_and_pending_ones_rejected_with_the_reason() {
        let pool = Pool::new(1);
        let mut list = HostPromises::default();
        let mut pending = Vec::new();
        for i in 0..1_000 {
            let slot = HostSlot::new();
            list.track(&slot, job(&pool));
            if i % 100 == 0 {
                pending.push(slot);
            } else {
                slot.settle(Outcome::Cancelled);
            }
        }
        // Pruning keeps the list near what is still pending, not near what was ever handed out.
        assert!(list.slots.len() <= 2 * PRUNE_FLOOR, "{}", list.slots.len());
        list.reject_all("domain 'd' restarted");
        assert!(list.slots.is_empty());
        for slot in pending {
            let mut promise = Promise::new(slot, None);
            match promise.try_take() {
                Some(Err(Error::Job(failure))) => {
                    assert_eq!(failure.kind, FailureKind::Refused);
                    assert_eq!(
                        failure.to_string(),
                        "job './m:run' was refused unrun: domain 'd' restarted"
                    );
                }
                other => panic!("expected a rejection, got {other:?}"),
            }
        }
    }
}
