//! `Pool`: the public handle on the work-stealing executor running Luau workers.

use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

use crate::executor::lanes::KeyLanes;
use crate::executor::stats::WorkerStats;
use crate::executor::threads::Executor;
use crate::jobs::protocol::pool_shared::{NativeTallies, PoolShared, WarmRuns};
use crate::jobs::worker::LuauWorker;
use crate::ledger::{default_budget, format_bytes, Charge, Ledger};
use crate::vm::Signal;

/// A work-stealing pool of worker threads, each owning isolated Luau VMs.
///
/// One pool serves any number of [`ScriptDomain`](crate::ScriptDomain)s. Each thread builds a VM
/// for a domain the first time it runs that domain's work. Dropping the last handle stops the
/// threads and joins them once each finishes the call it is in. Every domain holds a handle,
/// so the last one goes after every domain it served has stopped, and a stop interrupts the
/// domain's running jobs at their next interrupt check (a loop's back-edge, a call or a
/// return): the drop returns within microseconds of that, even with a `while true do end` job
/// in flight. Only one call into native code that makes no interrupt check (a host function
/// that blocks, a kernel) holds it until the call returns. See "Stopping stops" in
/// `docs/embedding.md`.
///
/// ```
/// let pool = skein::Pool::new(2);
/// assert_eq!(pool.threads(), 2);
/// assert_eq!(pool.stats().len(), 2);
/// ```
#[derive(Clone)]
pub struct Pool {
    inner: Arc<PoolCore>,
}

/// What every clone of a [`Pool`] shares; dropping the last one stops the executor's threads.
struct PoolCore {
    shared: Arc<PoolShared>,
    /// The pool's memory budget: the memory limit of every VM built for its domains, and what
    /// every domain's host memory holds.
    memory: Arc<Ledger>,
}

impl Drop for PoolCore {
    fn drop(&mut self) {
        self.shared.exec.shutdown();
    }
}

impl Pool {
    /// A pool of `threads` workers (at least one), with the default memory budget: the lower
    /// of the process's address-space limit (`RLIMIT_AS`) and the machine's memory, less a
    /// quarter (at least 256 MiB) kept for what no budget counts (code, thread stacks, the
    /// allocator's own room).
    pub fn new(threads: usize) -> Pool {
        Pool::with_memory_budget(threads, default_budget())
    }

    /// A pool of `threads` workers (at least one) whose domains may hold at most `bytes`
    /// together.
    ///
    /// The budget holds the memory limit ([`Plan::memory_limit`](crate::Plan::memory_limit))
    /// of every VM built for the pool's domains, taken whole when the domain is made (its
    /// engine VM and one VM per worker) or the worker actor spawned, since a VM may grow to its
    /// limit at any allocation; and every byte a domain's host memory holds
    /// ([`DomainSpec::host_memory`](crate::DomainSpec::host_memory)). A domain whose VMs do not
    /// fit is refused at [`ScriptDomain::new`](crate::ScriptDomain::new) with
    /// [`Error::Memory`](crate::Error::Memory); a script whose host memory does not fit is
    /// refused at the call that asked. So no allocation Skein makes for a script can fail for
    /// want of memory, which would abort the process.
    ///
    /// ```
    /// use skein::{DomainSpec, Plan, Pool, ScriptDomain};
    /// let pool = Pool::with_memory_budget(2, 256 << 20);
    /// assert_eq!(pool.memory_budget(), 256 << 20);
    /// // Three VMs (the engine's and one per worker) of 64 MiB fit, and are held while the domain lives.
    /// let small = ScriptDomain::new(&pool, DomainSpec::new("small").plan(Plan::new().memory_limit(64 << 20)))?;
    /// assert_eq!(pool.memory_held(), 192 << 20);
    /// // Three more do not.
    /// let refused = ScriptDomain::new(&pool, DomainSpec::new("big").plan(Plan::new().memory_limit(64 << 20)));
    /// assert_eq!(
    ///     refused.err().unwrap().to_string(),
    ///     "not enough memory: domain 'big' needs 3 VMs of 64 MiB (its engine VM and one per \
    ///      worker), and the pool's memory would hold 384 MiB, past its budget of 256 MiB"
    /// );
    /// drop(small);
    /// assert_eq!(pool.memory_held(), 0);
    /// # Ok::<(), skein::Error>(())
    /// ```
    pub fn with_memory_budget(threads: usize, bytes: usize) -> Pool {
        let threads = threads.max(1);
        let signals: Arc<[OnceLock<Arc<Signal>>]> = (0..threads).map(|_| OnceLock::new()).collect();
        let lanes = Arc::new(KeyLanes::new(threads));
        let warm_runs: WarmRuns = (0..threads).map(|_| Mutex::default()).collect();
        let native: NativeTallies = (0..threads).map(|_| Arc::default()).collect();
        let (for_workers, lanes_for_workers, warm_for_workers, native_for_workers) = (
            signals.clone(),
            lanes.clone(),
            warm_runs.clone(),
            native.clone(),
        );
        let exec = Executor::start(threads, move |index| {
            LuauWorker::new(
                index,
                &for_workers,
                &lanes_for_workers,
                &warm_for_workers,
                &native_for_workers,
            )
        });
        Pool {
            inner: Arc::new(PoolCore {
                shared: Arc::new(PoolShared {
                    exec,
                    signals,
                    lanes,
                    warm_runs,
                    native,
                }),
                memory: Arc::new(Ledger::named("the pool's memory", bytes, None)),
            }),
        }
    }

    /// The budget [`new`](Self::new) gives a pool on this machine and in this process.
    pub fn default_memory_budget() -> usize {
        default_budget()
    }

    /// A pool with one worker per available core.
    pub fn with_available_parallelism() -> Pool {
        Pool::new(std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    /// Number of worker threads.
    pub fn threads(&self) -> usize {
        self.inner.shared.exec.threads()
    }

    /// One row per worker: items run, steals, sleeps, VMs held, keys held, time keyed items
    /// waited for their key's VM, busy time.
    pub fn stats(&self) -> Vec<WorkerStats> {
        self.inner.shared.stats()
    }

    /// The pool's memory budget in bytes ([`with_memory_budget`](Self::with_memory_budget)).
    pub fn memory_budget(&self) -> usize {
        self.inner.memory.max()
    }

    /// What the pool's budget holds now: the memory limits of its domains' VMs and what their
    /// host memory holds.
    pub fn memory_held(&self) -> usize {
        self.inner.memory.held()
    }

    /// The pool's memory ledger, which every domain's host memory draws on.
    pub(crate) fn memory(&self) -> &Arc<Ledger> {
        &self.inner.memory
    }

    /// Takes the memory limits of `count` VMs of `limit` bytes for `who` (see
    /// [`reserve_vms`]).
    pub(crate) fn reserve_vms(
        &self,
        who: &str,
        count: usize,
        limit: usize,
        what: &str,
    ) -> crate::Result<Charge> {
        reserve_vms(&self.inner.memory, who, count, limit, what).map_err(crate::Error::Memory)
    }

    pub(crate) fn shared(&self) -> &Arc<PoolShared> {
        &self.inner.shared
    }
}

/// Takes the memory limits of `count` VMs of `limit` bytes for `who` ("domain 'game'") from
/// the pool's `memory`, held until the charge is dropped; `what` says which VMs ("its engine
/// VM and one per worker"). The refusal's text names all three and the budget.
pub(crate) fn reserve_vms(
    memory: &Arc<Ledger>,
    who: &str,
    count: usize,
    limit: usize,
    what: &str,
) -> Result<Charge, String> {
    let refuse = |text: String| {
        format!(
            "{who} needs {count} VM{} of {} ({what}), and {text}",
            if count == 1 { "" } else { "s" },
            format_bytes(limit)
        )
    };
    let bytes = count
        .checked_mul(limit)
        .ok_or_else(|| refuse("that is more than this machine can count".to_owned()))?;
    Charge::take(memory, bytes).map_err(|refused| refuse(refused.to_string()))
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("threads", &self.threads())
            .field("memory_budget", &self.memory_budget())
            .finish()
    }
}
