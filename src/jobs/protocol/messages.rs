//! The messages between threads: what a worker thread's inbox takes ([`WorkerMsg`]), what a
//! domain's engine thread drains from its mailbox ([`DomainEvent`]), and what reaches a
//! `@skein/worker` actor's lane ([`ActorWake`]).
//!
//! Only data lives here; who sends each message is written beside its variant, and who handles
//! it is the receiving thread's loop (`worker/`, `domain/`, `domain/actor/`).

use std::sync::Arc;

use bytes::Bytes;

use super::item::Item;
use super::job::JobShared;
use super::principal_shared::PrincipalShared;
use super::reply::{ReplyTo, Settlement};
use super::warm::WarmEntry;
use crate::jobs::leaves::registered::remote_job::{Control, RemoteOp, RemoteRegistration};
use crate::principal::capability::Authority;
use crate::principal::Principal;
use crate::shared::Parcel;
use crate::value::Message;
use crate::vm::{Outcome, PromiseId, ServiceCall};

/// Messages to a worker thread's inbox.
pub(crate) enum WorkerMsg {
    /// Settle a promise homed in the worker's VM for `principal`.
    Settle {
        principal: Principal,
        /// The serial of the VM the promise lives in: a replaced VM's replies are dropped.
        vm: u64,
        promise: PromiseId,
        outcome: Outcome,
    },
    /// A job this worker runs was cancelled: end its parked tasks.
    Cancel {
        principal: Principal,
        job: Arc<JobShared>,
    },
    /// Run an item of a key bound to this worker (never stolen: only this worker reads it).
    RunKeyed(Item),
    /// A key bound to this worker was released: forget it and run the `jobs.onRelease` watchers.
    Released { principal: Principal, key: Bytes },
    /// Run a new `jobs.warm` entry in this worker's VM for `principal`, building the VM if need
    /// be (never stolen: each worker warms its own VM).
    Warm {
        principal: Arc<PrincipalShared>,
        entry: Arc<WarmEntry>,
    },
    /// A shared-queue delivery for a pop parked in the worker's VM for `principal`.
    Parcel {
        principal: Principal,
        parcel: Parcel,
    },
    /// Run (or forget) registered job `job`, which lives in the worker's VM of serial `vm`.
    Registered {
        principal: Arc<PrincipalShared>,
        vm: u64,
        job: u64,
        op: RemoteOp,
    },
    /// A principal of the pool ended: the worker drops its VMs for ended principals (its poll,
    /// in the same round, does), even if it was asleep with nothing else to do.
    Ended,
}

/// Events to a domain's engine thread.
pub(crate) enum DomainEvent {
    /// Settle a promise homed in the engine VM.
    Settle {
        promise: PromiseId,
        outcome: Outcome,
    },
    /// A task failed with no one awaiting it.
    Report { label: String, failure: String },
    /// Something the host should see that fails nothing: a failure some code observes another
    /// way (a warm run whose failure the call's promise carries).
    Note { label: String, text: String },
    /// A shared-queue delivery for a pop parked in the engine VM.
    Parcel(Parcel),
    /// A query a worker forwarded. Boxed: it is rare next to the settlements that share the
    /// mailbox, and every event takes the size of the largest.
    Query(Box<Query>),
    /// A worker VM registered a job: add it to the registry.
    Registered(Box<RemoteRegistration>),
    /// A call of a job registered from a worker VM ended: apply the commands it recorded, then
    /// mark the call done (errored with `failure` when it did not return).
    RegisteredDone {
        job: u64,
        commands: Vec<ServiceCall>,
        failure: Option<String>,
        /// The authority the job was registered with, installed while its commands apply.
        /// `None`: the domain's.
        authority: Option<Arc<Authority>>,
    },
    /// A handle in a worker VM paused, resumed or cancelled a job.
    RegisteredControl { job: u64, control: Control },
    /// Commands to apply in order, then (for a job that recorded them before its entry
    /// returned) the job's settlement to deliver.
    Apply {
        commands: Vec<ServiceCall>,
        /// The job's settlement, for a job whose entry recorded them before returning; `None`
        /// for commands recorded after (or outside any job), which are applied alone. Boxed,
        /// as [`Query`] is.
        then: Option<Box<Settlement>>,
        /// The authority of the work that recorded them, installed while they apply. `None`:
        /// the domain's.
        authority: Option<Arc<Authority>>,
    },
}

/// A query a worker forwarded: apply `commands` (its job's, recorded before it, in order), run
/// the query, and settle the promise at `reply` with `{ true, answer }` or `{ false, error }`.
pub(crate) struct Query {
    pub(crate) service: Arc<str>,
    pub(crate) args: Message,
    pub(crate) commands: Vec<ServiceCall>,
    pub(crate) reply: ReplyTo,
    /// The registered job whose item made the query, whose `forwarded_calls` it counts.
    pub(crate) job: Option<u64>,
    /// The authority of the task that made it (its item's): the engine thread installs it
    /// while it applies the commands and runs the service. `None`: the domain's.
    pub(crate) authority: Option<Arc<Authority>>,
}

/// What reaches a `@skein/worker` worker's VM from the pool and the shared store: its lane
/// applies each on its own thread, between runs.
pub(crate) enum ActorWake {
    /// Settle a promise homed in the worker's VM.
    Settle {
        promise: PromiseId,
        outcome: Outcome,
    },
    /// A shared-queue delivery for a pop parked in the worker's VM.
    Parcel(Parcel),
}
