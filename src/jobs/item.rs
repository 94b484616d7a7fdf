//! A pool item: one `jobs.dispatch` (or one `jobs.parallelFor` chunk) on its way to a worker,
//! and the replies that come back.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::time::Instant;

use bytes::Bytes;

use crate::sync::Ordering;
use crate::vm::CancelToken;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::chunking::Run;
use super::gather::Gather;
use super::pool::PoolShared;
use super::principal_cell::PrincipalCell;
use super::promise::HostSlot;
use crate::pool::handoff::{CancelOutcome, Handoff};
use crate::principal::Principal;
use crate::value::{ByteBudget, Charge, Held, Message};
use crate::vm::{Cancel, Outcome, OwnerIdentity, PromiseId, ServiceCall};

/// No worker has started the job yet.
pub(crate) const NOT_STARTED: usize = usize::MAX;

/// The most a domain generation's jobs may hold in the host, in bytes: 256 MiB. A job that a
/// script dispatched (or one chunk of a `parallelFor`) holds the weight of its arguments while
/// its item waits and runs, and [`JOB_WEIGHT`] plus its result's weight until its promise is
/// gone (settled and collected by Luau's garbage collector). A dispatch past the bound is
/// refused at the call, and a result past it rejects its promise; nothing is queued or kept
/// beyond it.
pub const MAX_JOB_BYTES: usize = 256 << 20;

/// What one job weighs against [`MAX_JOB_BYTES`] besides its arguments and result: its item,
/// its shared state and its promise.
pub const JOB_WEIGHT: usize = 256;

/// Takes `n` bytes of a generation's job budget for a call (its jobs' weight, or its
/// arguments'), or refuses naming the call and what would have been held.
pub(crate) fn charge_job(budget: &Arc<ByteBudget>, n: usize, what: &str) -> Result<Charge, String> {
    Charge::take(budget, n).map_err(|would| {
        format!(
            "{what}: the domain's jobs would hold {would} bytes of arguments and results, past \
             the bound of {MAX_JOB_BYTES}; await some before dispatching more"
        )
    })
}

/// What the item and whoever holds its promise share: the hand-off state, the cancel token and
/// the job's name. One allocation per dispatch serves as the item's identity, the worker-side
/// owner's label and token, and the promise's canceller.
pub(crate) struct JobShared {
    pub(crate) handoff: Handoff,
    /// Read by the raw interrupt while the job runs.
    pub(crate) cancel: CancelToken,
    /// The worker that started the job, or [`NOT_STARTED`].
    pub(crate) worker: AtomicUsize,
    /// Its `opts.name`, if it has one.
    name: Option<String>,
    /// The module as the caller wrote it, and the entry: the name of a job without `opts.name`.
    module: Arc<str>,
    entry: Arc<str>,
    /// Who to tell when the job is cancelled while it runs.
    pool: Arc<PoolShared>,
    principal: Principal,
    /// `opts.key`, if the item has one.
    pub(crate) key: Option<Bytes>,
    /// Set by the worker that starts a keyed item: the key's first item in that VM since it
    /// bound. Written and read on that worker's thread only.
    pub(crate) fresh: AtomicBool,
    /// For an item of a registered job (`jobs.register`): the job's tally, so its forwarded
    /// queries and its items' waits are counted for it.
    pub(crate) tally: Option<Arc<JobTally>>,
    /// What the job holds of its generation's [`MAX_JOB_BYTES`], for the jobs scripts dispatch:
    /// given back when the last holder (the item, the promise's canceller) lets go.
    charge: OnceLock<Held>,
}

/// What a registered job's items count on worker threads: its id, which forwarded queries carry
/// back to the engine thread, and the time its items waited from queueing to start.
#[derive(Debug, Default)]
pub(crate) struct JobTally {
    pub(crate) id: u64,
    pub(crate) waited_ns: std::sync::atomic::AtomicU64,
}

impl JobShared {
    pub(crate) fn new(
        name: Option<String>,
        module: Arc<str>,
        entry: Arc<str>,
        pool: Arc<PoolShared>,
        principal: Principal,
        key: Option<Bytes>,
    ) -> Arc<JobShared> {
        Arc::new(JobShared {
            handoff: Handoff::new(),
            cancel: CancelToken::new(false),
            worker: AtomicUsize::new(NOT_STARTED),
            name,
            module,
            entry,
            pool,
            principal,
            key,
            fresh: AtomicBool::new(false),
            tally: None,
            charge: OnceLock::new(),
        })
    }

    /// Makes the job hold `charge` until it is dropped (once; a second charge is dropped). The
    /// chunks of one `parallelFor` share one charge.
    pub(crate) fn hold(&self, charge: Held) {
        let _ = self.charge.set(charge);
    }

    /// Adds a result's weight to what the job holds. Answers what would have been held when
    /// that passes the bound; a job that holds no charge (the host's) takes any result.
    pub(crate) fn charge_result(&self, weight: usize) -> Result<(), String> {
        match self.charge.get() {
            None => Ok(()),
            Some(charge) => charge.grow(weight).map_err(|would| {
                format!(
                    "the domain's jobs would hold {would} bytes of arguments and results, past \
                     the bound of {}; await and drop some results before dispatching more",
                    charge.budget().max()
                )
            }),
        }
    }

    /// As [`new`](Self::new), for an item of a registered job: it carries the job's tally.
    pub(crate) fn registered(
        name: String,
        module: Arc<str>,
        entry: Arc<str>,
        pool: Arc<PoolShared>,
        principal: Principal,
        key: Option<Bytes>,
        tally: Arc<JobTally>,
    ) -> Arc<JobShared> {
        Arc::new(JobShared {
            handoff: Handoff::new(),
            cancel: CancelToken::new(false),
            worker: AtomicUsize::new(NOT_STARTED),
            name: Some(name),
            module,
            entry,
            pool,
            principal,
            key,
            fresh: AtomicBool::new(false),
            tally: Some(tally),
            charge: OnceLock::new(),
        })
    }

    /// Stops the job: a queued one never runs (the hand-off refuses it); a running one has its
    /// token set, its worker's current run interrupted, and its parked tasks ended.
    pub(crate) fn request_cancel(self: &Arc<Self>) {
        if let Some(worker) = self.claim_cancel() {
            if let Some(signal) = self.pool.signals.get(worker).and_then(|s| s.get()) {
                signal.request_cancel();
            }
            self.pool.exec.post(
                worker,
                WorkerMsg::Cancel {
                    principal: self.principal,
                    job: self.clone(),
                },
            );
        }
    }

    /// How rejections name the job: its `opts.name`, or `module:entry`. Built only when a
    /// failure needs it, so the dispatch path formats nothing.
    pub(crate) fn label(&self) -> String {
        match &self.name {
            Some(name) => name.clone(),
            None => format!("{}:{}", self.module, self.entry),
        }
    }

    /// Moves the hand-off to cancelled. Answers the worker that must be told, when the job had
    /// started.
    fn claim_cancel(&self) -> Option<usize> {
        match self.handoff.cancel() {
            CancelOutcome::Running => {
                self.cancel.store(true, Ordering::Release);
                let worker = self.worker.load(Ordering::Acquire);
                (worker != NOT_STARTED).then_some(worker)
            }
            _ => None,
        }
    }
}

impl OwnerIdentity for JobShared {
    fn cancel_token(&self) -> Option<&CancelToken> {
        Some(&self.cancel)
    }

    fn key(&self) -> Option<&[u8]> {
        self.key.as_deref()
    }

    fn fresh(&self) -> bool {
        self.fresh.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn registered_job(&self) -> Option<u64> {
        self.tally.as_ref().map(|t| t.id)
    }
}

impl Cancel for JobShared {
    fn cancel(self: Arc<Self>) {
        self.request_cancel();
    }
}

/// `job 'name'`: how reports attribute a failed task of the job.
impl std::fmt::Display for JobShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.name {
            Some(name) => write!(f, "job '{name}'"),
            None => write!(f, "job '{}:{}'", self.module, self.entry),
        }
    }
}

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
    /// A Rust [`Promise`](crate::Promise) held by host code.
    Host(Arc<HostSlot>),
    /// Chunk `index` (from 0) of a `jobs.parallelFor`: its collector settles the promise.
    Chunk { gather: Arc<Gather>, index: usize },
    /// A promise homed in a `@skein/worker` worker's VM: its lane reads `wakes` between runs.
    Actor {
        wakes: crossbeam_channel::Sender<ActorWake>,
        promise: PromiseId,
    },
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
    Parcel(crate::shared::Parcel),
}

/// What an item's entry is called with.
pub(crate) enum ItemArgs {
    /// A dispatch's `args`, copied once at the call.
    Plain(Message),
    /// A `parallelFor` chunk: its table is built in the worker VM, around `args` that every
    /// chunk of the call shares (one copy at the call) and its own slice of a buffer.
    Chunk(ChunkArgs),
    /// A kernel job's call: a native function of the host over its copied input. The worker
    /// runs it without touching any VM.
    Kernel(KernelCall),
}

/// A native function the host registered by name (`ScriptDomain::register_kernel`).
pub(crate) type Kernel = Arc<dyn Fn(Message) -> Result<Message, String> + Send + Sync>;

/// One run of a kernel: the function and the input it runs over.
pub(crate) struct KernelCall {
    pub(crate) kernel: Kernel,
    pub(crate) input: Message,
}

/// The parts of one chunk's `{ index, count, first, last, args, data }` table.
pub(crate) struct ChunkArgs {
    /// From 1.
    pub(crate) index: usize,
    pub(crate) run: Run,
    pub(crate) args: Arc<Message>,
    pub(crate) data: Option<Bytes>,
}

impl ItemArgs {
    /// Builds the entry's argument in the worker VM.
    pub(crate) fn to_lua(&self, lua: &mlua::Lua) -> mlua::Result<mlua::Value> {
        match self {
            ItemArgs::Plain(message) => message.to_lua(lua),
            ItemArgs::Chunk(chunk) => {
                let t = lua.create_table_with_capacity(0, 6)?;
                // Luau numbers, not integers: the bounds are within ±2^53, so exact.
                t.raw_set("index", chunk.index as f64)?;
                t.raw_set("count", chunk.run.count() as f64)?;
                t.raw_set("first", chunk.run.first as f64)?;
                t.raw_set("last", chunk.run.last as f64)?;
                // Pushed from the message, so a top-level integer stays an integer.
                t.raw_set("args", &*chunk.args)?;
                if let Some(data) = &chunk.data {
                    t.raw_set("data", lua.create_buffer(data)?)?;
                }
                Ok(mlua::Value::Table(t))
            }
            ItemArgs::Kernel(call) => call.input.to_lua(lua),
        }
    }
}

/// One `jobs.dispatch`, or one chunk of a `jobs.parallelFor`, on its way to a worker.
pub(crate) struct Item {
    pub(crate) principal: Arc<PrincipalCell>,
    pub(crate) job: Arc<JobShared>,
    pub(crate) module: Arc<Path>,
    pub(crate) entry: Arc<str>,
    pub(crate) args: ItemArgs,
    pub(crate) deadline: Duration,
    pub(crate) reply: ReplyTo,
    /// The authority of the code that dispatched it; its task on the worker runs under it.
    pub(crate) authority: Arc<crate::principal::capability::Authority>,
    /// When a keyed item was dispatched, to measure how long it waited for its key's VM.
    pub(crate) queued_at: Option<Instant>,
    /// What its arguments hold of the generation's [`MAX_JOB_BYTES`] while it waits and runs
    /// (shared by the chunks of one `parallelFor`, which share their arguments); given back
    /// when the item is dropped, or when a worker has built its arguments in a VM. `None` for
    /// the host's own items.
    pub(crate) charge: Option<Held>,
}

/// A key's lane: the principal's keys are its own, so two domains using the same key string
/// never share a binding.
pub(crate) type LaneKey = (Principal, Bytes);

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
        principal: Arc<PrincipalCell>,
        entry: Arc<super::warm::WarmEntry>,
    },
    /// A shared-queue delivery for a pop parked in the worker's VM for `principal`.
    Parcel {
        principal: Principal,
        parcel: crate::shared::Parcel,
    },
    /// Run (or forget) registered job `job`, which lives in the worker's VM of serial `vm`.
    Registered {
        principal: Arc<PrincipalCell>,
        vm: u64,
        job: u64,
        op: super::registered::RemoteOp,
    },
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
    /// A shared-queue delivery for a pop parked in the engine VM.
    Parcel(crate::shared::Parcel),
    /// A query a worker forwarded: apply `commands` (its job's, recorded before it, in order),
    /// run the query, and settle the promise at `reply` with `{ true, answer }` or
    /// `{ false, error }`.
    Query {
        service: Arc<str>,
        args: Message,
        commands: Vec<ServiceCall>,
        reply: ReplyTo,
        /// The registered job whose item made the query, whose `forwarded_calls` it counts.
        job: Option<u64>,
        /// The authority of the task that made it (its item's): the engine thread installs it
        /// while it applies the commands and runs the service. `None`: the domain's.
        authority: Option<Arc<crate::principal::capability::Authority>>,
    },
    /// A worker VM registered a job: add it to the registry.
    Registered(Box<super::registered::RemoteRegistration>),
    /// A call of a job registered from a worker VM ended: apply the commands it recorded, then
    /// mark the call done (errored with `failure` when it did not return).
    RegisteredDone {
        job: u64,
        commands: Vec<ServiceCall>,
        failure: Option<String>,
        /// The authority the job was registered with, installed while its commands apply.
        /// `None`: the domain's.
        authority: Option<Arc<crate::principal::capability::Authority>>,
    },
    /// A handle in a worker VM paused, resumed or cancelled a job.
    RegisteredControl {
        job: u64,
        control: super::registered::Control,
    },
    /// Commands to apply in order, then (for a job that recorded them before its entry
    /// returned) the job's settlement to deliver.
    Apply {
        commands: Vec<ServiceCall>,
        /// The job's settlement, for a job whose entry recorded them before returning; `None`
        /// for commands recorded after (or outside any job), which are applied alone.
        then: Option<Settlement>,
        /// The authority of the work that recorded them, installed while they apply. `None`:
        /// the domain's.
        authority: Option<Arc<crate::principal::capability::Authority>>,
    },
}

/// A job's outcome held back until the engine thread has applied its commands.
///
/// Nothing is lost to a domain that is gone: a settlement dropped undelivered (its post failed,
/// or the mailbox was dropped with it inside) rejects the promise, naming why, so a host
/// `Promise` or a worker's awaiting task never waits forever.
pub(crate) struct Settlement {
    pending: Option<(ReplyTo, Outcome)>,
    job: Arc<JobShared>,
    principal: Arc<PrincipalCell>,
    pool: Arc<PoolShared>,
    /// A keyed item's lane turn: the key's next item starts only after the commands applied.
    /// Dropped after the reply (fields drop after `Drop::drop`).
    _turn: Option<super::keys::LaneTurn>,
}

impl Settlement {
    pub(crate) fn new(
        reply: ReplyTo,
        outcome: Outcome,
        job: Arc<JobShared>,
        principal: Arc<PrincipalCell>,
        pool: Arc<PoolShared>,
        turn: Option<super::keys::LaneTurn>,
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
            let failure = crate::vm::JobFailure {
                job: self.job.label(),
                module: None,
                entry: None,
                kind: crate::vm::FailureKind::Refused,
                message: format!(
                    "its engine-service commands were not applied: {}",
                    self.principal.end_reason()
                ),
                traceback: None,
            };
            let outcome = Outcome::Rejected(Arc::new(failure));
            super::worker::reply(&self.principal, to, outcome, &self.pool);
        }
    }
}
