//! Replies: where a job's outcome goes ([`ReplyTo`]) and [`reply`], the one function every
//! settle path ends in; and [`Settlement`], an outcome held back until the engine thread has
//! applied the commands its job recorded.
//!
//! A reply travels as the message its home reads: a [`DomainEvent::Settle`] for the engine VM, a
//! [`WorkerMsg::Settle`] for a worker VM, an [`ActorWake::Settle`] for an actor's VM; a host
//! slot (alone, or inside the job the host dispatched) is settled in place, and a `parallelFor` chunk deposits into its collector, which
//! replies once for the whole call.

use std::sync::Arc;

use crossbeam_channel::Sender;

use super::gather::Gather;
use super::job::JobShared;
use super::keys::LaneTurn;
use super::messages::{ActorWake, DomainEvent, WorkerMsg};
use super::pool_shared::PoolShared;
use super::principal_shared::PrincipalShared;
use crate::jobs::leaves::outcome_slot::OutcomeSlot;
use crate::vm::{FailureKind, JobFailure, Outcome, PromiseId};

/// Where a job's outcome goes.
pub(crate) enum ReplyTo {
    /// A promise homed in a domain's engine VM.
    Engine(PromiseId),
    /// A promise homed in a worker VM (an item dispatched from another item).
    Worker {
        worker: usize,
        /// The serial of the VM the promise lives in.
        vm: u64,
        promise: PromiseId,
    },
    /// A slot of its own, which Rust code waits on or polls through a
    /// [`Promise`](crate::Promise): an actor's forwarded query (its thread blocks on it), a
    /// registered job's item (the engine thread takes from it each frame).
    Slot(Arc<OutcomeSlot>),
    /// A Rust [`Promise`](crate::Promise) of a job the host dispatched: the slot inside the job.
    HostJob(Arc<JobShared>),
    /// Chunk `index` (from 0) of a `jobs.parallelFor`: its collector settles the promise.
    Chunk { gather: Arc<Gather>, index: usize },
    /// A promise homed in an actor's VM (`@skein/worker`): its lane reads `wakes` between runs.
    Actor {
        wakes: Sender<ActorWake>,
        promise: PromiseId,
    },
}

/// Sends a job's outcome to the promise's home.
pub(crate) fn reply(principal: &PrincipalShared, to: ReplyTo, outcome: Outcome, pool: &PoolShared) {
    match to {
        ReplyTo::Engine(promise) => {
            // An ended generation's engine VM is gone, and its promises with it.
            if principal.is_alive() {
                principal
                    .mailbox
                    .send(DomainEvent::Settle { promise, outcome });
            }
        }
        ReplyTo::Worker {
            worker,
            vm,
            promise,
        } => pool.exec.post(
            worker,
            WorkerMsg::Settle {
                principal: principal.id,
                vm,
                promise,
                outcome,
            },
        ),
        ReplyTo::Slot(slot) => {
            slot.settle(outcome);
        }
        ReplyTo::HostJob(job) => {
            job.host_slot().settle(outcome);
        }
        ReplyTo::Chunk { gather, index } => gather.deposit(index, outcome),
        ReplyTo::Actor { wakes, promise } => {
            // A worker that has ended dropped its end: its VM and the promise are gone.
            let _ = wakes.send(ActorWake::Settle { promise, outcome });
        }
    }
}

/// A job's outcome held back until the engine thread has applied its commands.
///
/// Nothing is lost to a domain that is gone: a settlement dropped undelivered (its post failed,
/// or the mailbox was dropped with it inside) rejects the promise, naming why, so a host
/// `Promise` or a worker's awaiting task never waits forever.
pub(crate) struct Settlement {
    pending: Option<(ReplyTo, Outcome)>,
    job: Arc<JobShared>,
    principal: Arc<PrincipalShared>,
    pool: Arc<PoolShared>,
    /// A keyed item's lane turn: the key's next item starts only after the commands applied.
    /// Dropped after the reply (fields drop after `Drop::drop`).
    _turn: Option<LaneTurn>,
}

impl Settlement {
    pub(crate) fn new(
        reply: ReplyTo,
        outcome: Outcome,
        job: Arc<JobShared>,
        principal: Arc<PrincipalShared>,
        pool: Arc<PoolShared>,
        turn: Option<LaneTurn>,
    ) -> Settlement {
        Settlement {
            pending: Some((reply, outcome)),
            job,
            principal,
            pool,
            _turn: turn,
        }
    }

    /// The job that recorded the commands, named in reports.
    pub(crate) fn job(&self) -> &JobShared {
        &self.job
    }

    /// Takes the reply and outcome to deliver (the engine applied the commands).
    pub(crate) fn take(&mut self) -> Option<(ReplyTo, Outcome)> {
        self.pending.take()
    }
}

impl Drop for Settlement {
    fn drop(&mut self) {
        if let Some((to, _)) = self.pending.take() {
            let failure = JobFailure {
                job: self.job.label(),
                module: None,
                entry: None,
                kind: FailureKind::Refused,
                message: format!(
                    "its engine-service commands were not applied: {}",
                    self.principal.end_reason()
                ),
                traceback: None,
            };
            let outcome = Outcome::Rejected(Arc::new(failure));
            reply(&self.principal, to, outcome, &self.pool);
        }
    }
}
