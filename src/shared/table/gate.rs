//! The gate of a named table: how writes made in place (a value replaced in its cell) and the
//! operations that need the whole table to hold still (a new version, a loop's picture, a
//! snapshot) keep out of each other's way, with no lock on the way of a write in place and
//! nothing at all on the way of a read of one key.
//!
//! # Protocol
//! The gate counts writes in *stripes*, one per group of threads (a thread keeps its stripe),
//! each on its own cache line, so writers on different threads touch different lines. A stripe
//! has `started` and `finished`.
//!
//! - **A write in place** adds one to its stripe's `started`, then looks at `closed`. If the
//!   gate is closed it takes the one back and waits for the closer to finish; else it finds the
//!   cell in the current version, changes it, and adds one to `finished` (or, when it changed
//!   nothing after all, takes its `started` back).
//! - **A closer** (a write that publishes a new version, an `atomic` whose function read more
//!   than its key, a read that lost too many races) takes the closers' mutex, sets `closed`, and
//!   waits until every stripe reads `finished == started` (read in that order). From then until
//!   it opens, no write in place is running or can start, so the table holds still for it. A
//!   closer that writes adds one to its stripe's `started` before it changes a cell in place
//!   (as a write in place does, so a read that saw the change, or a nested table's revision it
//!   raised, reads again), or once it has published a new version; and one to `finished`
//!   before opening.
//! - **A read of many keys** (`Gate::read`) takes the *count*, the sum of `started`, at a moment
//!   when every stripe reads `finished == started`, reads, and keeps what it read only if the
//!   sum of `started` is still the count. A write that the read saw changed a cell after adding
//!   to `started`, so the read sees that addition and reads again. After `TRIES` failed tries it
//!   closes the gate for its read. A read of one key needs none of this: a cell's value is one
//!   atomic load.
//!
//! The count is the named table's revision: every write adds exactly one (a write in place at
//! `finished`; a closer's at both). A write in place that changed nothing adds none; a closer
//! that published a version adds one even when the version holds what the last one held.
//!
//! # Memory ordering
//! Every access to the stripes and to `closed` is `SeqCst`. A writer's addition to `started`
//! and its check of `closed`, against a closer's store to `closed` and its reads of the
//! stripes, is the store-buffering pattern: in the single total order either the writer sees
//! `closed`, or the closer sees the writer's `started` and waits for its `finished`. A reader
//! that loads a cell value (`Acquire`) written after a writer's addition to `started` sees that
//! addition in its later read of `started`; the values of writes counted in `finished` are
//! visible to whoever read that `finished`.

use crossbeam_utils::CachePadded;

use crate::sync::{thread, thread_local, AtomicBool, AtomicU64, Mutex, MutexGuard, Ordering};

/// Stripes per named table: 8 cache lines of 128 bytes (1 KiB a table, and at most 4,096
/// names). Two under loom, where a model has at most a few threads.
#[cfg(not(loom))]
const STRIPES: usize = 8;
#[cfg(loom)]
const STRIPES: usize = 2;

/// Optimistic tries of a many-key read before it closes the gate.
#[cfg(not(loom))]
const TRIES: u32 = 8;
#[cfg(loom)]
const TRIES: u32 = 1;

const SC: Ordering = Ordering::SeqCst;

#[derive(Debug, Default)]
struct Stripe {
    started: AtomicU64,
    finished: AtomicU64,
}

#[derive(Debug)]
pub(crate) struct Gate {
    stripes: [CachePadded<Stripe>; STRIPES],
    closed: AtomicBool,
    /// Held by a closer for as long as the gate is closed; a writer that found the gate closed
    /// waits on it.
    closers: Mutex<()>,
}

thread_local! {
    /// This thread's stripe.
    #[allow(clippy::missing_const_for_thread_local)] // loom's thread_local! takes no const block
    static STRIPE: usize = stripe_for_this_thread();
}

#[cfg(not(loom))]
fn stripe_for_this_thread() -> usize {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % STRIPES
}

/// Under loom, from the model's own thread numbering, so every run of a model is the same.
#[cfg(loom)]
fn stripe_for_this_thread() -> usize {
    let id = format!("{:?}", thread::current().id());
    id.bytes().map(usize::from).sum::<usize>() % STRIPES
}

/// Waits a moment for a writer in flight: a spin hint, and a yield now and then (always under
/// loom, which must see the thread give way).
fn pause(round: &mut u32) {
    *round += 1;
    #[cfg(not(loom))]
    if !(*round).is_multiple_of(64) {
        std::hint::spin_loop();
        return;
    }
    thread::yield_now();
}

impl Gate {
    pub(crate) fn new() -> Gate {
        let gate = Gate {
            stripes: std::array::from_fn(|_| CachePadded::new(Stripe::default())),
            closed: AtomicBool::new(false),
            closers: Mutex::new(()),
        };
        gate.seq_cst_from_the_start();
        gate
    }

    /// Under loom, stores every counter's and the flag's first value again with `SeqCst`. The
    /// protocol relies on `SeqCst` loads reading the latest `SeqCst` store (the store-buffering
    /// pairs in `# Memory ordering`); loom gives a `SeqCst` load that guarantee only among
    /// `SeqCst` stores, and records an atomic's initial value as a `Release` store, so without
    /// this it lets a writer's load of `closed` read the initial `false` after a closer stored
    /// `true`, an outcome the memory model forbids (the initial value happens before both). The
    /// values stored are the ones already there: outside loom this would change nothing.
    #[cfg(loom)]
    fn seq_cst_from_the_start(&self) {
        self.closed.store(false, SC);
        for stripe in &self.stripes {
            stripe.started.store(0, SC);
            stripe.finished.store(0, SC);
        }
    }

    #[cfg(not(loom))]
    fn seq_cst_from_the_start(&self) {}

    fn mine(&self) -> &Stripe {
        &self.stripes[STRIPE.with(|s| *s)]
    }

    /// Runs `write`, a write in place, while no closer holds the gate. `write` answers its
    /// result and whether it changed anything.
    pub(crate) fn write<R>(&self, write: impl FnOnce() -> (R, bool)) -> R {
        let stripe = self.mine();
        loop {
            stripe.started.fetch_add(1, SC);
            // The mutant writes without looking (loom-tests/README.md).
            #[cfg(not(loom_mutant = "gate_write_ignores_closed"))]
            let closed = self.closed.load(SC);
            #[cfg(loom_mutant = "gate_write_ignores_closed")]
            let closed = false;
            if !closed {
                break;
            }
            stripe.started.fetch_sub(1, SC);
            drop(self.closers.lock().unwrap_or_else(|e| e.into_inner()));
        }
        // Should `write` unwind, the section still ends, uncounted: a closer waiting for this
        // stripe to drain must not wait forever.
        let section = Section(stripe);
        let (out, changed) = write();
        std::mem::forget(section);
        // The mutant changes a cell without counting it (loom-tests/README.md).
        #[cfg(loom_mutant = "cell_no_revision_bump")]
        let changed = false;
        if changed {
            stripe.finished.fetch_add(1, SC);
        } else {
            stripe.started.fetch_sub(1, SC);
        }
        out
    }

    /// The count when no write in place is running: `None` while one is.
    fn quiet(&self) -> Option<u64> {
        let mut count = 0u64;
        for stripe in &self.stripes {
            let finished = stripe.finished.load(SC);
            if stripe.started.load(SC) != finished {
                return None;
            }
            count = count.wrapping_add(finished);
        }
        Some(count)
    }

    fn started(&self) -> u64 {
        self.stripes
            .iter()
            .fold(0u64, |sum, s| sum.wrapping_add(s.started.load(SC)))
    }

    /// The named table's revision: every write to it so far. One read per stripe.
    pub(crate) fn count(&self) -> u64 {
        self.stripes
            .iter()
            .fold(0u64, |sum, s| sum.wrapping_add(s.finished.load(SC)))
    }

    /// Runs `read` so that what it reads of the table is one moment of it; answers what it
    /// answered and the count at that moment. `read` may run more than once.
    pub(crate) fn read<R>(&self, mut read: impl FnMut() -> R) -> (R, u64) {
        let mut round = 0;
        for _ in 0..TRIES {
            if let Some(count) = self.quiet() {
                let out = read();
                // The mutant keeps what it read without checking (loom-tests/README.md).
                #[cfg(loom_mutant = "gate_read_no_validation")]
                return (out, count);
                #[cfg(not(loom_mutant = "gate_read_no_validation"))]
                if self.started() == count {
                    return (out, count);
                }
            }
            pause(&mut round);
        }
        let closed = self.close();
        let out = read();
        (out, closed.count())
    }

    /// Closes the gate: no write in place runs until the answer is dropped.
    pub(crate) fn close(&self) -> Closed<'_> {
        let guard = self.closers.lock().unwrap_or_else(|e| e.into_inner());
        self.closed.store(true, SC);
        let mut round = 0;
        let count = loop {
            if let Some(count) = self.quiet() {
                break count;
            }
            pause(&mut round);
        };
        Closed {
            gate: self,
            count,
            wrote: false,
            _guard: guard,
        }
    }
}

/// A write in place under way; dropped only if the write unwinds.
struct Section<'a>(&'a Stripe);

impl Drop for Section<'_> {
    fn drop(&mut self) {
        self.0.started.fetch_sub(1, SC);
    }
}

/// The gate, closed: the table holds still. Opens when dropped.
pub(crate) struct Closed<'a> {
    gate: &'a Gate,
    count: u64,
    wrote: bool,
    _guard: MutexGuard<'a, ()>,
}

impl Closed<'_> {
    /// The count while closed: the revision the table has now.
    pub(crate) fn count(&self) -> u64 {
        self.count
    }

    /// This closer writes: counted in `started` now, in `finished` when it opens, so the count
    /// moves on by one. Called *before* a change made in place: cells and nested tables'
    /// revisions are shared with the version readers are reading, and a read that sees the
    /// change must also see `started` move (see the module docs). A new version may count
    /// itself once published: its nodes, revisions included, are its own.
    pub(crate) fn wrote(&mut self) {
        debug_assert!(!self.wrote, "a closer counts its write once");
        if !self.wrote {
            self.wrote = true;
            // The mutant counts the write only when the gate opens, as `started` and `finished`
            // together (loom-tests/README.md).
            #[cfg(not(loom_mutant = "gate_closer_counts_at_open"))]
            self.gate.mine().started.fetch_add(1, SC);
        }
    }
}

impl Drop for Closed<'_> {
    fn drop(&mut self) {
        if self.wrote {
            let stripe = self.gate.mine();
            #[cfg(loom_mutant = "gate_closer_counts_at_open")]
            stripe.started.fetch_add(1, SC);
            stripe.finished.fetch_add(1, SC);
        }
        // Opened before the mutex is let go (the guard field drops after this body).
        self.gate.closed.store(false, SC);
    }
}
