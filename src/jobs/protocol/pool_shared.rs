//! [`PoolShared`]: what the pool's threads and the code that hands them work share (the
//! executor's queues and inboxes, each worker's interrupt signal, the key lanes, recent warm
//! runs). Every path that queues an item or posts a message goes through it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, OnceLock};

use super::item::{Item, LaneKey};
use super::messages::WorkerMsg;
use crate::executor::lanes::KeyLanes;
use crate::executor::stats::{HeldKey, WarmRun, WorkerStats, KEYS_LISTED, WARM_RUNS_KEPT};
use crate::executor::threads::Executor;
use crate::sync::Arc as SyncArc;
use crate::vm::{NativeMode, NativeTally, Signal};

/// What the pool's threads and its users share.
pub(crate) struct PoolShared {
    /// `crate::sync::Arc`: the executor is built on the loom-checked primitives. Named by
    /// what it carries, not by the Luau worker that runs it, so the protocol's files that post
    /// to it sit below `worker/`.
    pub(crate) exec: SyncArc<Executor<Item, WorkerMsg>>,
    /// Each worker's interrupt signal, registered by the worker when it starts.
    pub(crate) signals: Arc<[OnceLock<Arc<Signal>>]>,
    /// The key lanes: which worker each key is bound to, and its items in order. One per pool,
    /// shared with each worker's copy of this struct.
    pub(crate) lanes: Arc<KeyLanes<LaneKey, Item>>,
    /// Each worker's recent `jobs.warm` runs. Kept apart from the executor's counters: a warm
    /// run is rare, and a lock here costs the hot counters nothing.
    pub(crate) warm_runs: WarmRuns,
    /// Each worker's native code: what its VMs compiled and the executable memory they hold.
    pub(crate) native: NativeTallies,
}

/// Per worker, its most recent warm runs.
pub(crate) type WarmRuns = Arc<[Mutex<VecDeque<WarmRun>>]>;

/// Per worker, the native code its VMs hold (each VM holds its worker's tally until it ends).
pub(crate) type NativeTallies = Arc<[Arc<NativeTally>]>;

impl PoolShared {
    /// The per-worker rows, with the keys each worker holds from the key lanes, the code
    /// generator its VMs compile with and the native code they hold.
    pub(crate) fn stats(&self) -> Vec<WorkerStats> {
        self.stats_listing(|_| true)
    }

    /// As [`stats`](Self::stats), listing in each row's `keys` only the keys `listed` lets
    /// through (a domain's script sees its own keys, never another domain's).
    pub(crate) fn stats_listing(&self, listed: impl Fn(&LaneKey) -> bool) -> Vec<WorkerStats> {
        let mut rows = self.exec.stats();
        for (row, keys) in rows.iter_mut().zip(self.lanes.keys_held()) {
            row.keys_held = keys;
            row.code_generator = NativeMode::code_generator();
        }
        for (row, keys) in rows.iter_mut().zip(self.lanes.held(KEYS_LISTED, listed)) {
            row.keys = keys
                .into_iter()
                .map(|((principal, key), waited)| HeldKey {
                    domain: principal.domain.get(),
                    generation: principal.generation.get(),
                    key: String::from_utf8_lossy(&key).into_owned(),
                    items: waited.items,
                    wait_total: waited.total,
                    wait_max: waited.longest,
                })
                .collect();
        }
        for (row, tally) in rows.iter_mut().zip(self.native.iter()) {
            let used = tally.read();
            row.native_modules = used.modules;
            row.native_bytecode_bytes = used.bytecode;
            row.native_code_bytes = used.code;
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

    /// Raises every worker's interrupt signal as a cancel: a run whose job's token or whose VM's
    /// token is set stops at its next interrupt check; any other run takes the interrupt's slow
    /// path once, finds nothing holds, and goes on (`vm/budget.rs`). Called after a principal ended
    /// ([`PrincipalShared::end`](super::principal_shared::PrincipalShared::end)), whose worker VMs run
    /// with its token. Every worker is also told (`WorkerMsg::Ended`), so one that sleeps wakes
    /// and drops the principal's VMs now, not at its next item: nothing of the principal, its
    /// VMs' memory included, outlives it.
    pub(crate) fn interrupt_runs(&self) {
        for signal in self.signals.iter().filter_map(OnceLock::get) {
            signal.request_cancel();
        }
        for worker in 0..self.exec.threads() {
            self.exec.post(worker, WorkerMsg::Ended);
        }
    }

    /// Queues an item for any worker.
    pub(crate) fn inject(&self, item: Item) {
        self.exec.inject(item);
    }
}
