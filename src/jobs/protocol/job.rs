//! A job's shared state: what a pool item and whoever holds its promise share (the hand-off,
//! the cancel token, the name, the job budget's charge), and the budget itself.
//!
//! One [`JobShared`] per dispatch (or per `parallelFor` chunk) is the item's identity on the
//! worker, the worker-side owner's label and cancel token, and the promise's canceller.

use std::fmt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::Arc;

use bytes::Bytes;

use super::messages::WorkerMsg;
use super::pool_shared::PoolShared;
use crate::executor::handoff::{CancelOutcome, Handoff};
use crate::jobs::leaves::outcome_slot::OutcomeSlot;
use crate::ledger::{Charge, Held, Ledger};
use crate::principal::Principal;
use crate::sync::Ordering;
use crate::vm::{Cancel, CancelToken, OwnerIdentity};

/// No worker has started the job yet.
pub(crate) const NOT_STARTED: usize = usize::MAX;

/// The most a domain generation's jobs may hold in the host, in bytes: 256 MiB. A job that a
/// script dispatched (or one chunk of a `parallelFor`) holds the weight of its arguments while
/// its item waits and runs, and [`JOB_WEIGHT`], its `opts.name`'s bytes and its result's weight
/// until its promise is gone (settled and collected by Luau's garbage collector). A dispatch past the bound is
/// refused at the call, and a result past it rejects its promise; nothing is queued or kept
/// beyond it.
pub(crate) const MAX_JOB_BYTES: usize = 256 << 20;

/// What one job weighs against [`MAX_JOB_BYTES`] besides its arguments and result: its item,
/// its shared state and its promise.
pub(crate) const JOB_WEIGHT: usize = 256;

/// Takes `n` bytes of a generation's job budget for a call (its jobs' weight, or its
/// arguments'), or refuses naming the call and what would have been held.
pub(crate) fn charge_job(budget: &Arc<Ledger>, n: usize, what: &str) -> Result<Charge, String> {
    Charge::take(budget, n).map_err(|refused| {
        let text = refused.text(|would| {
            format!(
                "the domain's jobs would hold {would} bytes of arguments and results, past the \
                 bound of {MAX_JOB_BYTES}; await some before dispatching more"
            )
        });
        format!("{what}: {text}")
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
    /// Its `opts.name`, if it has one: shared by the chunks of one `parallelFor` or `jobs.map`.
    name: Option<Arc<str>>,
    /// What it runs: read by the worker that starts it, and the name of a job without
    /// `opts.name`.
    pub(crate) target: Arc<JobTarget>,
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
    charge: Option<Held>,
    /// Where the outcome goes when the host dispatched the job (`ReplyTo::HostJob`): in the
    /// job's own allocation, so a host dispatch allocates once. Unused by other jobs.
    host: OutcomeSlot,
}

/// What a job runs: its module as the caller wrote it, the module's resolved path, and the
/// entry. One is kept per module and entry a VM dispatches to and shared by their jobs, so a
/// dispatch takes one reference to it where it took four to the three names, and the threads
/// that start, settle and drop jobs share one count between them.
#[derive(Debug)]
pub(crate) struct JobTarget {
    pub(crate) spec: Arc<str>,
    pub(crate) path: Arc<Path>,
    pub(crate) entry: Arc<str>,
}

impl JobTarget {
    pub(crate) fn new(spec: Arc<str>, path: Arc<Path>, entry: Arc<str>) -> Arc<JobTarget> {
        Arc::new(JobTarget { spec, path, entry })
    }
}

/// What a registered job's items count on worker threads: its id, which forwarded queries carry
/// back to the engine thread, and the time its items waited from queueing to start.
#[derive(Debug, Default)]
pub(crate) struct JobTally {
    pub(crate) id: u64,
    pub(crate) waited_ns: AtomicU64,
}

impl JobShared {
    /// The slot a host [`Promise`](crate::Promise) of this job waits on.
    pub(crate) fn host_slot(&self) -> &OutcomeSlot {
        &self.host
    }

    /// A job of `module` and `entry` alone, as [`dispatched`](Self::dispatched) makes it with a
    /// target of its own (the module's path as written).
    #[cfg(test)]
    pub(crate) fn new(
        name: Option<Arc<str>>,
        module: Arc<str>,
        entry: Arc<str>,
        pool: Arc<PoolShared>,
        principal: Principal,
        key: Option<Bytes>,
        charge: Option<Held>,
    ) -> Arc<JobShared> {
        let path = Arc::from(Path::new(&*module));
        let target = JobTarget::new(module, path, entry);
        Self::dispatched(name, target, pool, principal, key, charge)
    }

    /// The state of a job a script or the host dispatched, holding `charge` (a script's job's
    /// weight; the chunks of one `parallelFor` share one) until it is dropped.
    pub(crate) fn dispatched(
        name: Option<Arc<str>>,
        target: Arc<JobTarget>,
        pool: Arc<PoolShared>,
        principal: Principal,
        key: Option<Bytes>,
        charge: Option<Held>,
    ) -> Arc<JobShared> {
        Self::make(name, target, pool, principal, key, None, charge)
    }

    /// As [`new`](Self::new), for an item of a registered job: it carries the job's tally.
    pub(crate) fn registered(
        name: String,
        target: Arc<JobTarget>,
        pool: Arc<PoolShared>,
        principal: Principal,
        key: Option<Bytes>,
        tally: Arc<JobTally>,
    ) -> Arc<JobShared> {
        Self::make(
            Some(Arc::from(name)),
            target,
            pool,
            principal,
            key,
            Some(tally),
            None,
        )
    }

    /// The one allocation of a job: not started, not cancelled, holding `charge`, if any.
    #[inline]
    fn make(
        name: Option<Arc<str>>,
        target: Arc<JobTarget>,
        pool: Arc<PoolShared>,
        principal: Principal,
        key: Option<Bytes>,
        tally: Option<Arc<JobTally>>,
        charge: Option<Held>,
    ) -> Arc<JobShared> {
        Arc::new(JobShared {
            handoff: Handoff::new(),
            cancel: CancelToken::new(false),
            worker: AtomicUsize::new(NOT_STARTED),
            name,
            target,
            pool,
            principal,
            key,
            fresh: AtomicBool::new(false),
            tally,
            charge,
            host: OutcomeSlot::default(),
        })
    }

    /// Adds a result's weight to what the job holds. Answers what would have been held when
    /// that passes the bound; a job that holds no charge (the host's) takes any result.
    pub(crate) fn charge_result(&self, weight: usize) -> Result<(), String> {
        match &self.charge {
            None => Ok(()),
            Some(charge) => charge.grow(weight).map_err(|refused| {
                let max = charge.ledger().max();
                refused.text(|would| {
                    format!(
                        "the domain's jobs would hold {would} bytes of arguments and results, \
                         past the bound of {max}; await and drop some results before \
                         dispatching more"
                    )
                })
            }),
        }
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
            Some(name) => name.to_string(),
            None => format!("{}:{}", self.target.spec, self.target.entry),
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
        self.fresh.load(Ordering::Relaxed)
    }

    fn registered_job(&self) -> Option<u64> {
        self.tally.as_ref().map(|t| t.id)
    }
}

impl Cancel for JobShared {
    fn cancel(self: Arc<Self>) {
        self.request_cancel();
    }

    fn key(&self) -> Option<&Bytes> {
        self.key.as_ref()
    }
}

/// `job 'name'`: how reports attribute a failed task of the job.
impl fmt::Display for JobShared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.name {
            Some(name) => write!(f, "job '{name}'"),
            None => write!(f, "job '{}:{}'", self.target.spec, self.target.entry),
        }
    }
}
