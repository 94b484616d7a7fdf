//! Per-worker counters and the snapshot rows `Executor::stats` returns.
//!
//! The counters are plain `std` relaxed atomics even under `cfg(loom)`: they take part in no
//! protocol (nobody decides anything from them), and keeping them out of the model keeps its state
//! space small. Each worker's block is cache-padded so that one worker counting never bounces the
//! cache line another worker is counting on.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// One worker thread's activity since the pool started.
///
/// A snapshot: each field is read on its own, so a row taken while the worker runs may mix values
/// from slightly different moments.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerStats {
    /// The worker's index, `0..threads`.
    pub worker: usize,
    /// Items this worker ran, whichever queue they came from.
    pub items_run: u64,
    /// Items this worker took from a sibling's deque.
    pub steals: u64,
    /// Times this worker parked because it had nothing to do.
    pub sleeps: u64,
    /// Panics that escaped the worker's logic and were contained.
    pub panics: u64,
    /// Luau VMs this worker's thread holds right now.
    pub vms_held: usize,
    /// Keys bound to this worker right now (`opts.key`), until each is released.
    pub keys_held: usize,
    /// Of `items_run`, the keyed items (`opts.key`), which reach their worker outside the queues.
    pub keyed_items: u64,
    /// Time the keyed items this worker started waited, from dispatch to start, for their turn
    /// in their key's VM: in total, and the longest single wait.
    pub key_wait_total: Duration,
    /// The longest wait of one keyed item for its key's VM.
    pub key_wait_max: Duration,
    /// The keys bound to this worker, each with what its items waited for their turn: at most
    /// [`KEYS_LISTED`](crate::stats::WorkerStats::KEYS_LISTED) of the `keys_held`, those that waited
    /// longest in total first (a worker may hold thousands of keys; `keys_held` counts them all).
    pub keys: Vec<HeldKey>,
    /// Time spent inside the worker's logic (items, messages, polls).
    pub busy: Duration,
    /// The `jobs.warm` entries this worker's VMs ran, oldest first: the most recent
    /// [`WARM_RUNS_KEPT`](crate::stats::WorkerStats::WARM_RUNS_KEPT) of them, failed ones with why.
    pub warm_runs: Vec<WarmRun>,
    /// The code generator this worker's VMs compile native code with (`"x86_64"`, `"aarch64"`),
    /// as each domain's plan asks (`Plan::native`); `None` where the platform has none and every
    /// VM runs the interpreter.
    pub code_generator: Option<&'static str>,
    /// Chunks (module versions and scripts) that the VMs this worker holds now handed to the
    /// code generator; zero in `NativeMode::Off` and where there is no code generator.
    pub native_modules: usize,
    /// The bytecode of those chunks, in bytes: at most 4 MiB per VM (past that a module runs
    /// interpreted).
    pub native_bytecode_bytes: usize,
    /// The executable memory the code generators of those VMs have mapped, in bytes: blocks of
    /// 4 MiB, the first when a VM first compiles, at most 16 MiB per VM (past that a module
    /// runs interpreted). It lies outside the VMs' heaps and their memory limits.
    pub native_code_bytes: usize,
}

impl WorkerStats {
    /// How many warm runs each worker's row keeps; older ones are dropped first: 64.
    pub const WARM_RUNS_KEPT: usize = WARM_RUNS_KEPT;

    /// How many of its keys a worker's row lists in [`keys`](WorkerStats::keys), those that
    /// waited longest in total first: 64.
    pub const KEYS_LISTED: usize = KEYS_LISTED;
}

/// How many of its keys a worker's row lists.
pub(crate) const KEYS_LISTED: usize = 64;

/// One key bound to a worker (`opts.key`), with what its items waited, from dispatch to start,
/// for their turn in the key's VM: counted as each item settles, since the key was bound (a
/// release ends the binding, and the key's next item starts the count again).
///
/// ```
/// let pool = skein::Pool::new(1);
/// assert!(pool.stats()[0].keys.is_empty(), "no key bound yet");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HeldKey {
    /// The domain that dispatched with the key: its `DomainId::get` (each domain's keys are its
    /// own, as `opts.key` is).
    pub domain: u64,
    /// That domain's generation when it dispatched (`Generation::get`).
    pub generation: u64,
    /// The key as `opts.key` gave it (invalid UTF-8 replaced).
    pub key: String,
    /// The key's items that settled since it was bound.
    pub items: u64,
    /// Their waits added up.
    pub wait_total: Duration,
    /// The longest of them.
    pub wait_max: Duration,
}

/// How many warm runs each worker's row keeps; older ones are dropped first.
pub(crate) const WARM_RUNS_KEPT: usize = 64;

/// One run of a `jobs.warm` entry in one worker VM.
///
/// ```
/// let pool = skein::Pool::new(1);
/// assert!(pool.stats()[0].warm_runs.is_empty(), "nothing warmed yet");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WarmRun {
    /// `module.entry`, the module as the caller wrote it.
    pub name: String,
    /// Wall time from the entry's start to its end, waits included.
    pub elapsed: Duration,
    /// Why the run failed (it raised, panicked, or ran past a bound); `None` when it ended well.
    pub error: Option<String>,
}

impl WarmRun {
    /// Whether the run ended well.
    pub fn ok(&self) -> bool {
        self.error.is_none()
    }
}

/// The live counters behind one [`WorkerStats`] row.
#[derive(Debug, Default)]
pub(crate) struct WorkerCounters {
    items_run: AtomicU64,
    steals: AtomicU64,
    sleeps: AtomicU64,
    panics: AtomicU64,
    vms_held: AtomicUsize,
    busy_nanos: AtomicU64,
    keyed_items: AtomicU64,
    key_wait_nanos: AtomicU64,
    key_wait_max_nanos: AtomicU64,
}

impl WorkerCounters {
    pub(crate) fn item_run(&self) {
        self.items_run.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn stole(&self) {
        self.steals.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn slept(&self) {
        self.sleeps.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn panicked(&self) {
        self.panics.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn set_vms_held(&self, n: usize) {
        self.vms_held.store(n, Ordering::Relaxed);
    }

    pub(crate) fn add_busy(&self, spent: Duration) {
        // Saturate rather than wrap: 2^64 ns is 584 years of busy time.
        let nanos = u64::try_from(spent.as_nanos()).unwrap_or(u64::MAX);
        self.busy_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    pub(crate) fn key_waited(&self, waited: Duration) {
        let nanos = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
        self.keyed_items.fetch_add(1, Ordering::Relaxed);
        self.key_wait_nanos.fetch_add(nanos, Ordering::Relaxed);
        self.key_wait_max_nanos.fetch_max(nanos, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self, worker: usize) -> WorkerStats {
        WorkerStats {
            worker,
            items_run: self.items_run.load(Ordering::Relaxed),
            steals: self.steals.load(Ordering::Relaxed),
            sleeps: self.sleeps.load(Ordering::Relaxed),
            panics: self.panics.load(Ordering::Relaxed),
            vms_held: self.vms_held.load(Ordering::Relaxed),
            // Keys are bound in the pool's lanes, not by the executor; the pool fills this in.
            keys_held: 0,
            keyed_items: self.keyed_items.load(Ordering::Relaxed),
            key_wait_total: Duration::from_nanos(self.key_wait_nanos.load(Ordering::Relaxed)),
            key_wait_max: Duration::from_nanos(self.key_wait_max_nanos.load(Ordering::Relaxed)),
            // Keys are bound in the pool's lanes; the pool fills this in.
            keys: Vec::new(),
            busy: Duration::from_nanos(self.busy_nanos.load(Ordering::Relaxed)),
            // Warm runs are recorded by the Luau workers, not the executor; the pool fills this in.
            warm_runs: Vec::new(),
            // The executor runs no Luau; the pool fills these in.
            code_generator: None,
            native_modules: 0,
            native_bytecode_bytes: 0,
            native_code_bytes: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_reads_every_counter() {
        let c = WorkerCounters::default();
        c.item_run();
        c.item_run();
        c.stole();
        c.slept();
        c.slept();
        c.slept();
        c.panicked();
        c.set_vms_held(4);
        c.add_busy(Duration::from_micros(7));
        c.key_waited(Duration::from_micros(5));
        c.key_waited(Duration::from_micros(2));
        let row = c.snapshot(3);
        assert_eq!(
            row,
            WorkerStats {
                worker: 3,
                items_run: 2,
                steals: 1,
                sleeps: 3,
                panics: 1,
                vms_held: 4,
                keys_held: 0,
                keyed_items: 2,
                key_wait_total: Duration::from_micros(7),
                key_wait_max: Duration::from_micros(5),
                keys: Vec::new(),
                busy: Duration::from_micros(7),
                warm_runs: Vec::new(),
                code_generator: None,
                native_modules: 0,
                native_bytecode_bytes: 0,
                native_code_bytes: 0,
            }
        );
    }
}
