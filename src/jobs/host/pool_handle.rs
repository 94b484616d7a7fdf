//! `Pool`: the public handle on the work-stealing executor running Luau workers.

use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

use crate::jobs::pool_shared::{NativeTallies, PoolShared, WarmRuns};
use crate::jobs::worker::LuauWorker;
use crate::pool::executor::Executor;
use crate::pool::lanes::KeyLanes;
use crate::pool::stats::WorkerStats;
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
    inner: Arc<PoolHandle>,
}

struct PoolHandle {
    shared: Arc<PoolShared>,
}

impl Drop for PoolHandle {
    fn drop(&mut self) {
        self.shared.exec.shutdown();
    }
}

impl Pool {
    /// A pool of `threads` workers (at least one).
    pub fn new(threads: usize) -> Pool {
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
            inner: Arc::new(PoolHandle {
                shared: Arc::new(PoolShared {
                    exec,
                    signals,
                    lanes,
                    warm_runs,
                    native,
                }),
            }),
        }
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

    pub(crate) fn shared(&self) -> &Arc<PoolShared> {
        &self.inner.shared
    }
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("threads", &self.threads())
            .finish()
    }
}
