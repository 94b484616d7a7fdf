//! `Pool`: the public handle on the work-stealing executor running Luau workers.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

use super::item::{Item, LaneKey};
use super::worker::LuauWorker;
use crate::pool::executor::Executor;
use crate::pool::lanes::KeyLanes;
use crate::pool::stats::{WarmRun, WorkerStats, WARM_RUNS_KEPT};
use crate::vm::Signal;

/// What the pool's threads and its users share.
pub(crate) struct PoolShared {
    /// `crate::sync::Arc`: the executor is built on the loom-checked primitives.
    pub(crate) exec: crate::sync::Arc<Executor<LuauWorker>>,
    /// Each worker's interrupt signal, registered by the worker when it starts.
    pub(crate) signals: Arc<[OnceLock<Arc<Signal>>]>,
    /// The key lanes: which worker each key is bound to, and its items in order. One per pool,
    /// shared with each worker's copy of this struct.
    pub(crate) lanes: Arc<KeyLanes<LaneKey, Item>>,
    /// Each worker's recent `jobs.warm` runs. Kept apart from the executor's counters: a warm
    /// run is rare, and a lock here costs the hot counters nothing.
    pub(crate) warm_runs: WarmRuns,
}

/// Per worker, its most recent warm runs.
pub(crate) type WarmRuns = Arc<[Mutex<VecDeque<WarmRun>>]>;

impl PoolShared {
    /// The per-worker rows, with the keys each worker holds from the key lanes.
    pub(crate) fn stats(&self) -> Vec<WorkerStats> {
        let mut rows = self.exec.stats();
        for (row, keys) in rows.iter_mut().zip(self.lanes.keys_held()) {
            row.keys_held = keys;
        }
        for (row, runs) in rows.iter_mut().zip(self.warm_runs.iter()) {
            let runs = runs.lock().unwrap_or_else(|e| e.into_inner());
            row.warm_runs = runs.iter().cloned().collect();
        }
        rows
    }

    /// Records one warm run of worker `worker`, dropping its oldest past [`WARM_RUNS_KEPT`].
    pub(crate) fn record_warm_run(&self, worker: usize, run: WarmRun) {
        if let Some(runs) = self.warm_runs.get(worker) {
            let mut runs = runs.lock().unwrap_or_else(|e| e.into_inner());
            if runs.len() >= WARM_RUNS_KEPT {
                runs.pop_front();
            }
            runs.push_back(run);
        }
    }

    /// Queues an item for any worker.
    pub(crate) fn inject(&self, item: Item) {
        self.exec.inject(item);
    }
}

/// A work-stealing pool of worker threads, each owning isolated Luau VMs.
///
/// One pool serves any number of [`ScriptDomain`](crate::ScriptDomain)s. Each thread builds a VM
/// for a domain the first time it runs that domain's work. Dropping the last handle stops the
/// threads after the items they run finish their current run.
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
        let (for_workers, lanes_for_workers, warm_for_workers) =
            (signals.clone(), lanes.clone(), warm_runs.clone());
        let exec = Executor::start(threads, move |index| {
            LuauWorker::new(index, &for_workers, &lanes_for_workers, &warm_for_workers)
        });
        Pool {
            inner: Arc::new(PoolHandle {
                shared: Arc::new(PoolShared {
                    exec,
                    signals,
                    lanes,
                    warm_runs,
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
