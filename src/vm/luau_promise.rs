//! Promises homed in one VM.
//!
//! A promise lives in the VM that made it (its *home*); whoever completes the work sends the
//! outcome to the home's inbox as plain data, and the home settles the promise there and queues
//! the tasks that await it. No promise state is ever shared between threads.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use super::scheduler::TaskId;
use crate::value::Message;

/// Identifies a promise within its home VM.
pub(crate) type PromiseId = u64;

/// How a promise settled.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Outcome {
    /// The work answered this value.
    Resolved(Message),
    /// The work failed.
    Rejected(std::sync::Arc<super::JobFailure>),
    /// The promise was cancelled.
    Cancelled,
}

impl Outcome {
    /// The `status()` string of a promise settled this way.
    pub(crate) fn status(&self) -> &'static str {
        match self {
            Outcome::Resolved(_) => "resolved",
            Outcome::Rejected(_) => "rejected",
            Outcome::Cancelled => "cancelled",
        }
    }
}

impl Outcome {
    /// Whether a copy costs no allocation: a scalar value, a rejection (its failure is shared)
    /// or a cancellation. Such an outcome is kept inline once settled.
    fn copies_cheaply(&self) -> bool {
        matches!(
            self,
            Outcome::Resolved(
                Message::Nil
                    | Message::Boolean(_)
                    | Message::Integer(_)
                    | Message::Number(_)
                    | Message::Vector(_)
            ) | Outcome::Rejected(_)
                | Outcome::Cancelled
        )
    }
}

/// A settled promise's outcome as its cell keeps and hands it out: inline when copying it is
/// cheap (the common echo of a number costs no allocation per promise), shared behind an `Rc`
/// when its value would be copied deep (a string, a table).
#[derive(Clone)]
pub(crate) enum SettledOutcome {
    /// An outcome whose copy allocates nothing.
    Inline(Outcome),
    /// Any other outcome.
    Shared(Rc<Outcome>),
}

impl SettledOutcome {
    fn new(outcome: Outcome) -> Self {
        if outcome.copies_cheaply() {
            SettledOutcome::Inline(outcome)
        } else {
            SettledOutcome::Shared(Rc::new(outcome))
        }
    }
}

impl std::ops::Deref for SettledOutcome {
    type Target = Outcome;

    fn deref(&self) -> &Outcome {
        match self {
            SettledOutcome::Inline(outcome) => outcome,
            SettledOutcome::Shared(outcome) => outcome,
        }
    }
}

enum State {
    Pending { waiters: Vec<TaskId> },
    Settled(SettledOutcome),
}

/// Stops the work behind a promise when the promise is cancelled.
pub(crate) trait Cancel {
    /// Stop the work. Called at most once.
    fn cancel(self: std::sync::Arc<Self>);

    /// The key the work runs under (`opts.key`), if it has one: an await from work of the same
    /// key is refused instead of waiting forever.
    fn key(&self) -> Option<&bytes::Bytes> {
        None
    }
}

/// The canceller a promise holds.
pub(crate) type Canceller = std::sync::Arc<dyn Cancel>;

/// One promise's state, shared by its handle and the home's pending table.
pub(crate) struct PromiseCell {
    id: PromiseId,
    state: RefCell<State>,
    /// Held until the promise is cancelled or dropped, so a pending promise always has it; it
    /// also answers the item's key ([`Cancel::key`]).
    canceller: Cell<Option<Canceller>>,
    /// What the promise stands for, for error messages: `jobs.dispatch promise`.
    pub(crate) what: &'static str,
    /// Whether code has awaited the promise or seen it rejected: a rejection nobody observed
    /// is a failure nobody handled.
    observed: Cell<bool>,
    /// Why its resolved value could not be built in the VM, when it could not: what an await
    /// raises instead.
    unbuilt: Cell<Option<Box<str>>>,
}

impl PromiseCell {
    /// The promise's id in its home.
    pub(crate) fn id(&self) -> PromiseId {
        self.id
    }

    /// `"pending" | "resolved" | "rejected" | "cancelled"`. Answering `"rejected"` counts as
    /// the rejection being observed.
    pub(crate) fn status(&self) -> &'static str {
        match &*self.state.borrow() {
            State::Pending { .. } => "pending",
            State::Settled(outcome) => {
                self.observed.set(true);
                outcome.status()
            }
        }
    }

    /// The outcome, once settled: whoever asks has observed it.
    pub(crate) fn outcome(&self) -> Option<SettledOutcome> {
        match &*self.state.borrow() {
            State::Pending { .. } => None,
            State::Settled(outcome) => {
                self.observed.set(true);
                Some(outcome.clone())
            }
        }
    }

    /// Adds a task to wake when the promise settles: that task observes the outcome. A task
    /// already waiting is not added twice (its await resumed early and parked again).
    pub(crate) fn add_waiter(&self, task: TaskId) {
        self.observed.set(true);
        if let State::Pending { waiters } = &mut *self.state.borrow_mut() {
            if !waiters.contains(&task) {
                waiters.push(task);
            }
        }
    }

    /// The tasks waiting on the promise while it is pending.
    pub(crate) fn waiters(&self) -> Vec<TaskId> {
        match &*self.state.borrow() {
            State::Pending { waiters } => waiters.clone(),
            State::Settled(_) => Vec::new(),
        }
    }

    /// The key of the item behind the promise, if it has one: its canceller's, which a pending
    /// promise holds.
    pub(crate) fn key(&self) -> Option<bytes::Bytes> {
        let canceller = self.canceller.take();
        let key = canceller.as_ref().and_then(|c| c.key().cloned());
        self.canceller.set(canceller);
        key
    }

    /// Sets the function that stops the work when the promise is cancelled.
    pub(crate) fn set_canceller(&self, canceller: Canceller) {
        self.canceller.set(Some(canceller));
    }

    /// The slab slot the promise was made in.
    pub(crate) fn index(&self) -> u32 {
        self.id as u32
    }

    /// Records that its resolved value could not be built in the VM, and why.
    pub(crate) fn unbuildable(&self, why: String) {
        self.unbuilt.set(Some(why.into_boxed_str()));
    }

    /// Why its resolved value could not be built, if it could not.
    pub(crate) fn unbuilt(&self) -> Option<String> {
        let unbuilt = self.unbuilt.take();
        let why = unbuilt.as_deref().map(str::to_owned);
        self.unbuilt.set(unbuilt);
        why
    }

    /// Whether the promise has not settled.
    pub(crate) fn is_pending(&self) -> bool {
        matches!(&*self.state.borrow(), State::Pending { .. })
    }

    /// The outcome once settled, without counting as observed (its handle is being made).
    pub(crate) fn settled_outcome(&self) -> Option<SettledOutcome> {
        match &*self.state.borrow() {
            State::Pending { .. } => None,
            State::Settled(outcome) => Some(outcome.clone()),
        }
    }

    /// Settles the promise; answers the waiters to wake, or `None` when it had settled already.
    fn settle(&self, outcome: Outcome) -> Option<(Vec<TaskId>, SettledOutcome)> {
        let mut state = self.state.borrow_mut();
        match &mut *state {
            State::Settled(_) => None,
            State::Pending { waiters } => {
                let waiters = std::mem::take(waiters);
                let outcome = SettledOutcome::new(outcome);
                *state = State::Settled(outcome.clone());
                Some((waiters, outcome))
            }
        }
    }
}

/// One slot of the table of promises: the promise in it and the generation that tells a reused
/// slot from the promise that held it before. A promise with a Luau handle keeps its slot after
/// it settles, for as long as the handle lives (the handle finds it by its index): its outcome,
/// its job's charge and whether code observed it stay in the cell until the VM sees the handle
/// collected (`promise_handle::free_collected`).
#[derive(Default)]
struct SlabSlot {
    generation: u32,
    cell: Option<Rc<PromiseCell>>,
    /// A handle was made for the promise in this slot.
    handle: bool,
}

/// The most unhandled rejections a VM keeps the failure of, to report; past it they are
/// only counted. Keeps a script that dispatches failing work and never awaits it from growing
/// the host's memory without bound.
///
/// [`ScriptDomain::run_until_idle`](crate::ScriptDomain::run_until_idle) reports each at its
/// end, when no task is left that could still await it:
///
/// ```
/// use skein::{DomainSpec, Plan, Pool, ScriptDomain};
///
/// let dir = tempfile::tempdir()?;
/// std::fs::write(dir.path().join("m.luau"), "return { boom = function() error('no') end }")?;
/// let pool = Pool::new(1);
/// let spec = DomainSpec::new("main").plan(Plan::new().root(dir.path()));
/// let domain = ScriptDomain::new(&pool, spec)?;
/// domain.exec(r#"jobs.dispatch("./m", "boom", nil, { name = "dropped" })"#)?;
/// domain.run_until_idle()?;
/// let reports = domain.take_reports();
/// assert_eq!(reports[0].source, "jobs.dispatch promise nobody awaited");
/// assert!(reports[0].message.starts_with("job 'dropped' failed: "));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub(crate) const UNAWAITED_KEPT: usize = 64;

/// A rejected promise that had no waiter when it settled: unhandled unless code observes it
/// while its handle lives. Held strongly, so a handle the script dropped is seen as the last
/// holder going (its slot is freed once the VM sees the handle collected), without a flag
/// allocated beside every promise.
struct Unawaited {
    cell: Rc<PromiseCell>,
    failure: Arc<super::JobFailure>,
}

/// Rejections no code observed: the first [`UNAWAITED_KEPT`], oldest first, as (what the
/// promise stood for, its failure), and how many more there were.
#[derive(Default)]
pub(crate) struct Unhandled {
    pub(crate) kept: Vec<(&'static str, Arc<super::JobFailure>)>,
    pub(crate) past_bound: u64,
}

impl Unhandled {
    fn add(&mut self, entry: Unawaited) {
        if self.kept.len() < UNAWAITED_KEPT {
            self.kept.push((entry.cell.what, entry.failure));
        } else {
            self.past_bound += 1;
        }
    }
}

/// A promise that just settled: what its home does next (write its handle, wake its waiters).
pub(crate) struct Settled {
    /// Its slot, when it keeps it for its handle.
    pub(crate) held: Option<u32>,
    pub(crate) waiters: Vec<TaskId>,
    pub(crate) outcome: SettledOutcome,
}

/// The promises of one VM: pending ones, and settled ones whose handle may still be alive.
///
/// A slab, not a map: an id is a slot index (low 32 bits) and the slot's generation (high 32
/// bits), so making and settling a promise costs no hashing, and a late reply for a slot that
/// now holds another promise is told apart by its generation.
#[derive(Default)]
pub(crate) struct Promises {
    slots: Vec<SlabSlot>,
    free: Vec<u32>,
    pending: usize,
    /// Settled promises whose slot waits for its handle to be collected.
    held: usize,
    /// How many may wait so before the VM looks for collected handles again.
    free_at: usize,
    /// Rejections that settled with no waiter and whose handle may still be observed.
    unawaited: Vec<Unawaited>,
    /// How long `unawaited` may grow before it is swept again.
    sweep_at: usize,
    /// Rejections that settled with no waiter and whose handle died unobserved.
    unhandled: Unhandled,
}

/// Settled promises a VM keeps for live handles before it first looks for collected ones.
const HELD_BEFORE_FREEING: usize = 256;

impl Promises {
    /// The slot the next [`make`](Self::make) takes: a raw caller enters its handle in the
    /// VM's table of handles before it makes the promise.
    pub(crate) fn next_index(&self) -> u32 {
        match self.free.last() {
            Some(index) => *index,
            None => self.slots.len() as u32,
        }
    }

    /// Makes a pending promise homed here.
    pub(crate) fn make(&mut self, what: &'static str) -> Rc<PromiseCell> {
        let index = self.take_slot();
        let slot = &mut self.slots[index as usize];
        let cell = Rc::new(PromiseCell {
            id: (u64::from(slot.generation) << 32) | u64::from(index),
            state: RefCell::new(State::Pending {
                waiters: Vec::new(),
            }),
            canceller: Cell::new(None),
            what,
            observed: Cell::new(false),
            unbuilt: Cell::new(None),
        });
        slot.cell = Some(cell.clone());
        self.pending += 1;
        cell
    }

    /// A free slot under a new generation.
    fn take_slot(&mut self) -> u32 {
        let index = match self.free.pop() {
            Some(index) => index,
            None => {
                self.slots.push(SlabSlot::default());
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[index as usize];
        slot.generation = slot.generation.wrapping_add(1);
        slot.handle = false;
        index
    }

    /// Notes that a handle was made for the promise in slot `index`: the slot is kept after
    /// the promise settles, until the handle is collected.
    pub(crate) fn mark_handle(&mut self, index: u32) {
        if let Some(slot) = self.slots.get_mut(index as usize) {
            slot.handle = true;
        }
    }

    /// Gives a promise that settled before its handle was made (and so lost its slot) a slot
    /// to be found from its handle by; answers the slot's index.
    pub(crate) fn adopt(&mut self, cell: &Rc<PromiseCell>) -> u32 {
        let index = self.take_slot();
        let slot = &mut self.slots[index as usize];
        slot.cell = Some(cell.clone());
        slot.handle = true;
        self.held += 1;
        index
    }

    /// The promise a handle names by its slot: pending, or settled with the handle alive.
    pub(crate) fn at_slot(&self, index: u32) -> Option<&Rc<PromiseCell>> {
        self.slots.get(index as usize)?.cell.as_ref()
    }

    /// Takes promise `id` out of the pending promises, if it is still pending: its slot is
    /// freed, or kept for its handle.
    fn take(&mut self, id: PromiseId) -> Option<(Rc<PromiseCell>, Option<u32>)> {
        let index = id as u32;
        let generation = (id >> 32) as u32;
        let slot = self.slots.get_mut(index as usize)?;
        if slot.generation != generation || !slot.cell.as_ref()?.is_pending() {
            return None;
        }
        self.pending -= 1;
        if slot.handle {
            self.held += 1;
            return Some((slot.cell.clone()?, Some(index)));
        }
        let cell = slot.cell.take()?;
        self.free.push(index);
        Some((cell, None))
    }

    /// Frees slot `index` of a settled promise whose handle was collected.
    pub(crate) fn free_held(&mut self, index: u32) {
        let Some(slot) = self.slots.get_mut(index as usize) else {
            return;
        };
        if slot.handle && slot.cell.as_ref().is_some_and(|cell| !cell.is_pending()) {
            slot.cell = None;
            slot.handle = false;
            self.free.push(index);
            self.held -= 1;
        }
    }

    /// Whether enough settled promises wait for their handles that the VM should look for
    /// collected ones.
    pub(crate) fn freeing_due(&self) -> bool {
        self.held >= self.free_at.max(HELD_BEFORE_FREEING)
    }

    /// The slots of settled promises kept for their handles.
    pub(crate) fn held_slots(&self) -> Vec<u32> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, slot)| {
                slot.handle && slot.cell.as_ref().is_some_and(|cell| !cell.is_pending())
            })
            .map(|(index, _)| index as u32)
            .collect()
    }

    /// After a look for collected handles: the next comes when twice as many are held.
    pub(crate) fn freed(&mut self) {
        self.free_at = 2 * self.held;
    }

    /// Settles promise `id`; answers the tasks to wake and the shared outcome. An unknown or
    /// already settled promise (a cancelled one whose work answered late) answers `None`.
    pub(crate) fn settle(&mut self, id: PromiseId, outcome: Outcome) -> Option<Settled> {
        let (cell, held) = self.take(id)?;
        let (waiters, outcome) = cell.settle(outcome)?;
        if let (Outcome::Rejected(failure), true) = (&*outcome, waiters.is_empty()) {
            if !cell.observed.get() {
                self.keep_unawaited(&cell, failure.clone());
            }
        }
        Some(Settled {
            held,
            waiters,
            outcome,
        })
    }

    #[cold]
    fn keep_unawaited(&mut self, cell: &Rc<PromiseCell>, failure: Arc<super::JobFailure>) {
        if self.unawaited.len() >= self.sweep_at.max(UNAWAITED_KEPT) {
            self.sweep_unawaited();
            // Each handle still alive holds memory inside the VM's limit; doubling keeps the
            // sweeps' cost constant per rejection.
            self.sweep_at = 2 * self.unawaited.len();
        }
        self.unawaited.push(Unawaited {
            cell: cell.clone(),
            failure,
        });
    }

    /// Drops the rejections code has observed and settles those whose handle died unobserved
    /// as unhandled: no code can observe them any more.
    fn sweep_unawaited(&mut self) {
        for entry in std::mem::take(&mut self.unawaited) {
            if entry.cell.observed.get() {
                continue;
            }
            // Only this record holds it: its handle is gone, so no code can observe it now.
            if Rc::strong_count(&entry.cell) == 1 {
                self.unhandled.add(entry);
            } else {
                self.unawaited.push(entry);
            }
        }
    }

    /// Takes the rejections that settled with no waiter and that no code has observed since
    /// (by awaiting the promise or seeing its status): failures nobody handled. Meant for when
    /// no task is left that could still observe them.
    pub(crate) fn take_unhandled(&mut self) -> Unhandled {
        self.sweep_unawaited();
        let mut unhandled = std::mem::take(&mut self.unhandled);
        for entry in std::mem::take(&mut self.unawaited) {
            unhandled.add(entry);
        }
        self.sweep_at = 0;
        unhandled
    }

    /// Cancels a pending promise: it settles as cancelled and its work is told to stop.
    /// Answers the tasks to wake, or `None` if it had settled already.
    pub(crate) fn cancel(&mut self, cell: &PromiseCell) -> Option<Settled> {
        let (_, held) = self.take(cell.id)?;
        let woken = cell.settle(Outcome::Cancelled);
        let canceller = cell.canceller.take();
        if let Some(canceller) = canceller {
            canceller.cancel();
        }
        woken.map(|(waiters, outcome)| Settled {
            held,
            waiters,
            outcome,
        })
    }

    /// Cancels the pending promises of the kinds `whats` that only tasks in `tasks` await, as
    /// [`cancel`](Self::cancel) does; their waiters are not woken (the caller ends them).
    /// Answers what it cancelled, for the VM to write into their handles.
    pub(crate) fn cancel_awaited_only_by(
        &mut self,
        tasks: &[TaskId],
        whats: &[&'static str],
    ) -> Vec<Settled> {
        let cells: Vec<Rc<PromiseCell>> = self
            .pending_cells()
            .filter(|cell| whats.contains(&cell.what))
            .filter(|cell| match &*cell.state.borrow() {
                State::Pending { waiters } => {
                    !waiters.is_empty() && waiters.iter().all(|w| tasks.contains(w))
                }
                State::Settled(_) => false,
            })
            .cloned()
            .collect();
        cells.iter().filter_map(|cell| self.cancel(cell)).collect()
    }

    /// The promises still pending, in slot order.
    pub(crate) fn pending_cells(&self) -> impl Iterator<Item = &Rc<PromiseCell>> {
        self.slots
            .iter()
            .filter_map(|slot| slot.cell.as_ref())
            .filter(|cell| cell.is_pending())
    }

    /// Number of promises still pending.
    pub(crate) fn pending(&self) -> usize {
        self.pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolved(n: i64) -> Outcome {
        Outcome::Resolved(Message::Integer(n))
    }

    #[test]
    fn a_settled_slot_is_reused_and_a_late_reply_for_its_old_promise_is_dropped() {
        let mut promises = Promises::default();
        let first = promises.make("test");
        assert_eq!(promises.pending(), 1);
        assert!(promises.settle(first.id(), resolved(1)).is_some());
        assert_eq!(first.status(), "resolved");
        assert_eq!(promises.pending(), 0);

        let second = promises.make("test");
        assert_eq!(second.id() as u32, first.id() as u32, "the slot is reused");
        assert_ne!(second.id(), first.id(), "under a new generation");
        // A second reply for the first promise must not settle the second.
        assert!(promises.settle(first.id(), resolved(2)).is_none());
        assert_eq!(second.status(), "pending");
        assert!(promises.settle(second.id(), resolved(3)).is_some());
        assert!(promises.settle(u64::MAX, resolved(4)).is_none());
    }

    #[test]
    fn cancel_settles_once_and_runs_the_canceller() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        struct Count(AtomicUsize);
        impl Cancel for Count {
            fn cancel(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let mut promises = Promises::default();
        let cell = promises.make("test");
        let ran = Arc::new(Count(AtomicUsize::new(0)));
        cell.set_canceller(ran.clone());
        assert!(promises.cancel(&cell).is_some());
        assert!(promises.cancel(&cell).is_none());
        assert!(promises.settle(cell.id(), resolved(1)).is_none());
        assert_eq!(cell.status(), "cancelled");
        assert_eq!(ran.0.load(Ordering::SeqCst), 1);
    }

    fn rejected(job: &str) -> Outcome {
        Outcome::Rejected(Arc::new(super::super::JobFailure {
            job: job.to_owned(),
            module: None,
            entry: None,
            kind: super::super::FailureKind::Raised,
            message: "broke".to_owned(),
            traceback: None,
        }))
    }

    fn jobs_of(unhandled: &Unhandled) -> Vec<&str> {
        unhandled.kept.iter().map(|(_, f)| f.job.as_str()).collect()
    }

    #[test]
    fn a_rejection_nobody_observes_is_unhandled_and_one_observed_is_not() {
        let mut promises = Promises::default();
        let (dropped, kept, awaited, seen) = (
            promises.make("test"),
            promises.make("test"),
            promises.make("test"),
            promises.make("test"),
        );
        for (cell, job) in [
            (&dropped, "dropped"),
            (&kept, "kept"),
            (&awaited, "awaited"),
            (&seen, "seen"),
        ] {
            assert!(promises.settle(cell.id(), rejected(job)).is_some());
        }
        assert_eq!(seen.status(), "rejected");
        // An await after the settlement reads the outcome (one before it is a waiter, and a
        // rejection with a waiter is never recorded).
        assert!(awaited.outcome().is_some());
        let dropped_id = dropped.id();
        drop(dropped);
        // A late reply for a settled promise records nothing more.
        assert!(promises.settle(dropped_id, rejected("again")).is_none());
        let unhandled = promises.take_unhandled();
        assert_eq!(jobs_of(&unhandled), ["dropped", "kept"]);
        assert_eq!(unhandled.past_bound, 0);
        // Each is answered once.
        assert!(promises.take_unhandled().kept.is_empty());
        // Resolved and cancelled promises are never failures.
        let ok = promises.make("test");
        promises.settle(ok.id(), resolved(1));
        let cancelled = promises.make("test");
        promises.cancel(&cancelled);
        assert!(promises.take_unhandled().kept.is_empty());
    }

    #[test]
    fn unhandled_rejections_keep_their_failure_up_to_the_bound_and_count_past_it() {
        for (n, kept, past) in [
            (UNAWAITED_KEPT, UNAWAITED_KEPT, 0),
            (UNAWAITED_KEPT + 1, UNAWAITED_KEPT, 1),
        ] {
            let mut promises = Promises::default();
            for i in 0..n {
                let cell = promises.make("test");
                promises.settle(cell.id(), rejected(&i.to_string()));
            }
            // Sweeps while they settled kept the bound: no more than it is held.
            assert!(promises.unhandled.kept.len() <= UNAWAITED_KEPT);
            let unhandled = promises.take_unhandled();
            assert_eq!(
                (unhandled.kept.len(), unhandled.past_bound),
                (kept, past as u64)
            );
            assert_eq!(unhandled.kept[0].1.job, "0", "oldest first");
        }
    }

    #[test]
    fn rejections_past_the_bound_that_code_observes_later_are_not_failures() {
        let mut promises = Promises::default();
        // Many rejections settle before the script gets round to awaiting them.
        let cells: Vec<_> = (0..4 * UNAWAITED_KEPT)
            .map(|_| {
                let cell = promises.make("test");
                promises.settle(cell.id(), rejected("later"));
                cell
            })
            .collect();
        for cell in &cells {
            assert!(cell.outcome().is_some());
        }
        let unhandled = promises.take_unhandled();
        assert_eq!((unhandled.kept.len(), unhandled.past_bound), (0, 0));
    }
}
