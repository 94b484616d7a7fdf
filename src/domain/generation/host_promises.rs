//! The host promises of one domain generation that may still be pending, so a restart rejects
//! every one of them with its reason.
//!
//! A host [`Promise`](crate::Promise) settles through its item's reply, and a job that is still
//! running when its generation ends may yet reply with a value. A restart promises more: every
//! pending promise of the old generation rejects, naming the restart. The domain therefore
//! keeps a weak list of the jobs it handed out (each holds its promise's slot) and, on restart,
//! settles each pending slot; a reply that still arrives later is ignored (a slot settles
//! once). A stop does not use the
//! list: it lets running jobs settle as they end.

use std::sync::{Arc, Weak};

use crate::jobs::{JobShared, NOT_STARTED};
use crate::vm::{FailureKind, JobFailure, Outcome};

/// The fewest entries the list holds before it prunes settled slots.
const PRUNE_FLOOR: usize = 64;

/// Weak handles on the jobs the host dispatched in one generation.
pub(crate) struct HostPromises {
    slots: Vec<Weak<JobShared>>,
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
    /// Remembers a job whose promise was handed to the host. A job nobody holds any more (its
    /// item ran and its promise is gone) has nobody left to tell.
    pub(crate) fn track(&mut self, job: &Arc<JobShared>) {
        if self.slots.len() >= self.prune_at {
            self.slots
                .retain(|job| job.upgrade().is_some_and(|j| j.host_slot().is_pending()));
            self.prune_at = (self.slots.len() * 2).max(PRUNE_FLOOR);
        }
        self.slots.push(Arc::downgrade(job));
    }

    /// Rejects every slot still pending with `reason`: a job that had not started was refused
    /// unrun, one that had started ended with its generation. Empties the list.
    pub(crate) fn reject_all(&mut self, reason: &str) {
        for job in self.slots.drain(..) {
            let Some(job) = job.upgrade() else { continue };
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
            job.host_slot().settle(Outcome::Rejected(Arc::new(failure)));
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
            None,
        )
    }

    #[test]
    fn settled_slots_are_pruned_and_pending_ones_rejected_with_the_reason() {
        let pool = Pool::new(1);
        let mut list = HostPromises::default();
        let mut pending = Vec::new();
        let mut settled = Vec::new();
        for i in 0..1_000 {
            let job = job(&pool);
            list.track(&job);
            if i % 100 == 0 {
                pending.push(job);
            } else {
                job.host_slot().settle(Outcome::Cancelled);
                // Held, as a promise nobody waited on yet would hold it: pruning reads the slot.
                settled.push(job);
            }
        }
        // Pruning keeps the list near what is still pending, not near what was ever handed out.
        assert!(list.slots.len() <= 2 * PRUNE_FLOOR, "{}", list.slots.len());
        list.reject_all("domain 'd' restarted");
        assert!(list.slots.is_empty());
        for job in pending {
            let mut promise = Promise::of_job(job);
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
