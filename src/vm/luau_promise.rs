//! Promises homed in one VM.
//!
//! A promise lives in the VM that made it (its *home*); whoever completes the work sends the
//! outcome to the home's inbox as plain data, and the home settles the promise there and queues
//! the tasks that await it. No promise state is ever shared between threads.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use mlua::state::RawLua;
use mlua::{
    AnyUserData, Function, IntoLua, Lua, MetaMethod, Table, UserData, UserDataFields,
    UserDataMethods, Value,
};

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

/// The value `task.await` hands over for a settled promise: a resolution is pushed straight
/// from its `Message` (so a top-level integer arrives an integer, which no `mlua::Value` can
/// carry), a rejection's text as a plain value.
pub(crate) enum AwaitedValue {
    Value(Value),
    /// An `Outcome::Resolved`, pushed from its message.
    Resolved(Rc<Outcome>),
}

impl IntoLua for AwaitedValue {
    fn into_lua(self, lua: &Lua) -> mlua::Result<Value> {
        match self {
            AwaitedValue::Value(v) => Ok(v),
            AwaitedValue::Resolved(outcome) => match &*outcome {
                Outcome::Resolved(message) => message.to_lua(lua),
                _ => Ok(Value::Nil),
            },
        }
    }

    unsafe fn push_into_stack(self, lua: &RawLua) -> mlua::Result<()> {
        // SAFETY: forwarded under mlua's contract for this call (one slot is free).
        unsafe {
            match self {
                AwaitedValue::Value(v) => v.push_into_stack(lua),
                AwaitedValue::Resolved(outcome) => match &*outcome {
                    Outcome::Resolved(message) => message.push_into_stack(lua),
                    _ => Value::Nil.push_into_stack(lua),
                },
            }
        }
    }
}

enum State {
    Pending { waiters: Vec<TaskId> },
    Settled(Rc<Outcome>),
}

/// Stops the work behind a promise when the promise is cancelled.
pub(crate) trait Cancel {
    /// Stop the work. Called at most once.
    fn cancel(self: std::sync::Arc<Self>);
}

/// The canceller a promise holds.
pub(crate) type Canceller = std::sync::Arc<dyn Cancel>;

/// One promise's state, shared by its handle and the home's pending table.
pub(crate) struct PromiseCell {
    id: PromiseId,
    state: RefCell<State>,
    canceller: RefCell<Option<Canceller>>,
    /// The key of the item behind the promise (`opts.key`), so an await from an item of the same
    /// key is refused instead of waiting forever.
    key: RefCell<Option<bytes::Bytes>>,
    /// What the promise stands for, for error messages: `jobs.dispatch promise`.
    pub(crate) what: &'static str,
    /// Whether code has awaited the promise or seen it rejected: a rejection nobody observed
    /// is a failure nobody handled.
    observed: Cell<bool>,
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
    pub(crate) fn outcome(&self) -> Option<Rc<Outcome>> {
        match &*self.state.borrow() {
            State::Pending { .. } => None,
            State::Settled(outcome) => {
                self.observed.set(true);
                Some(outcome.clone())
            }
        }
    }

    /// Adds a task to wake when the promise settles: that task observes the outcome.
    pub(crate) fn add_waiter(&self, task: TaskId) {
        self.observed.set(true);
        if let State::Pending { waiters } = &mut *self.state.borrow_mut() {
            waiters.push(task);
        }
    }

    /// The tasks waiting on the promise while it is pending.
    pub(crate) fn waiters(&self) -> Vec<TaskId> {
        match &*self.state.borrow() {
            State::Pending { waiters } => waiters.clone(),
            State::Settled(_) => Vec::new(),
        }
    }

    /// Records the key of the item behind the promise.
    pub(crate) fn set_key(&self, key: bytes::Bytes) {
        *self.key.borrow_mut() = Some(key);
    }

    /// The key of the item behind the promise, if it has one.
    pub(crate) fn key(&self) -> Option<bytes::Bytes> {
        self.key.borrow().clone()
    }

    /// Sets the function that stops the work when the promise is cancelled.
    pub(crate) fn set_canceller(&self, canceller: Canceller) {
        *self.canceller.borrow_mut() = Some(canceller);
    }

    /// Settles the promise; answers the waiters to wake, or `None` when it had settled already.
    fn settle(&self, outcome: Outcome) -> Option<(Vec<TaskId>, Rc<Outcome>)> {
        let mut state = self.state.borrow_mut();
        match &mut *state {
            State::Settled(_) => None,
            State::Pending { waiters } => {
                let waiters = std::mem::take(waiters);
                let outcome = Rc::new(outcome);
                *state = State::Settled(outcome.clone());
                Some((waiters, outcome))
            }
        }
    }
}

/// One slot of the pending table: the promise in it and the generation that tells a reused slot
/// from the promise that held it before.
#[derive(Default)]
struct Slot {
    generation: u32,
    cell: Option<Rc<PromiseCell>>,
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
/// holder going, without a flag allocated beside every promise.
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

/// The promises of one VM that are still pending.
///
/// A slab, not a map: an id is a slot index (low 32 bits) and the slot's generation (high 32
/// bits), so making and settling a promise costs no hashing, and a late reply for a slot that
/// now holds another promise is told apart by its generation.
#[derive(Default)]
pub(crate) struct Promises {
    slots: Vec<Slot>,
    free: Vec<u32>,
    pending: usize,
    /// Rejections that settled with no waiter and whose handle may still be observed.
    unawaited: Vec<Unawaited>,
    /// How long `unawaited` may grow before it is swept again.
    sweep_at: usize,
    /// Rejections that settled with no waiter and whose handle died unobserved.
    unhandled: Unhandled,
}

impl Promises {
    /// Makes a pending promise homed here.
    pub(crate) fn make(&mut self, what: &'static str) -> Rc<PromiseCell> {
        let index = match self.free.pop() {
            Some(index) => index,
            None => {
                self.slots.push(Slot::default());
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[index as usize];
        slot.generation = slot.generation.wrapping_add(1);
        let cell = Rc::new(PromiseCell {
            id: (u64::from(slot.generation) << 32) | u64::from(index),
            state: RefCell::new(State::Pending {
                waiters: Vec::new(),
            }),
            canceller: RefCell::new(None),
            key: RefCell::new(None),
            what,
            observed: Cell::new(false),
        });
        slot.cell = Some(cell.clone());
        self.pending += 1;
        cell
    }

    /// Takes promise `id` out of the pending table, if it is still there.
    fn take(&mut self, id: PromiseId) -> Option<Rc<PromiseCell>> {
        let index = id as u32;
        let generation = (id >> 32) as u32;
        let slot = self.slots.get_mut(index as usize)?;
        if slot.generation != generation {
            return None;
        }
        let cell = slot.cell.take()?;
        self.free.push(index);
        self.pending -= 1;
        Some(cell)
    }

    /// Settles promise `id`; answers the tasks to wake and the shared outcome. An unknown or
    /// already settled promise (a cancelled one whose work answered late) answers `None`.
    pub(crate) fn settle(
        &mut self,
        id: PromiseId,
        outcome: Outcome,
    ) -> Option<(Vec<TaskId>, Rc<Outcome>)> {
        let cell = self.take(id)?;
        let settled = cell.settle(outcome)?;
        if let (Outcome::Rejected(failure), true) = (&*settled.1, settled.0.is_empty()) {
            if !cell.observed.get() {
                self.keep_unawaited(&cell, failure.clone());
            }
        }
        Some(settled)
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
    pub(crate) fn cancel(&mut self, cell: &PromiseCell) -> Option<(Vec<TaskId>, Rc<Outcome>)> {
        self.take(cell.id)?;
        let woken = cell.settle(Outcome::Cancelled);
        let canceller = cell.canceller.borrow_mut().take();
        if let Some(canceller) = canceller {
            canceller.cancel();
        }
        woken
    }

    /// Cancels the pending promises of the kinds `whats` that only tasks in `tasks` await, as
    /// [`cancel`](Self::cancel) does; their waiters are not woken (the caller ends them).
    /// Answers how many it cancelled.
    pub(crate) fn cancel_awaited_only_by(
        &mut self,
        tasks: &[TaskId],
        whats: &[&'static str],
    ) -> usize {
        let cells: Vec<Rc<PromiseCell>> = self
            .slots
            .iter()
            .filter_map(|slot| slot.cell.as_ref())
            .filter(|cell| whats.contains(&cell.what))
            .filter(|cell| match &*cell.state.borrow() {
                State::Pending { waiters } => {
                    !waiters.is_empty() && waiters.iter().all(|w| tasks.contains(w))
                }
                State::Settled(_) => false,
            })
            .cloned()
            .collect();
        for cell in &cells {
            let _ = self.cancel(cell);
        }
        cells.len()
    }

    /// The promises still pending, in slot order.
    pub(crate) fn pending_cells(&self) -> impl Iterator<Item = &Rc<PromiseCell>> {
        self.slots.iter().filter_map(|slot| slot.cell.as_ref())
    }

    /// Number of promises still pending.
    pub(crate) fn pending(&self) -> usize {
        self.pending
    }
}

/// The Luau `PromiseHandle`: `await`, `cancel`, `status`.
///
/// Its `__index` is a plain Luau table of methods (built once per VM by [`install_methods`]),
/// so `p:await()` is a native table lookup rather than a call into Rust to find the method.
/// `await` is written in Luau because it yields.
#[derive(Clone)]
pub(crate) struct PromiseHandle(pub(crate) Rc<PromiseCell>);

impl UserData for PromiseHandle {
    fn add_fields<F: UserDataFields<Self>>(fields: &mut F) {
        fields.add_meta_field_with(MetaMethod::Index, |lua| {
            lua.named_registry_value::<Table>(METHODS_KEY)
        });
    }

    fn add_methods<M: UserDataMethods<Self>>(methods: &mut M) {
        methods.add_meta_method(MetaMethod::ToString, |_, this, ()| {
            Ok(format!(
                "PromiseHandle({}, {})",
                this.0.what,
                this.0.status()
            ))
        });
    }
}

/// Registry key of the `PromiseHandle` method table.
const METHODS_KEY: &str = "skein.promise.methods";

/// Builds the `PromiseHandle` method table; `await` is the prelude's `task.await`.
pub(crate) fn install_methods(lua: &Lua, await_fn: Function) -> mlua::Result<()> {
    let methods = lua.create_table()?;
    methods.raw_set("await", await_fn)?;
    methods.raw_set(
        "status",
        lua.create_function(|_, this: AnyUserData| Ok(this.borrow::<PromiseHandle>()?.0.status()))?,
    )?;
    methods.raw_set(
        "cancel",
        lua.create_function(|lua, this: AnyUserData| {
            let cell = this.borrow::<PromiseHandle>()?.0.clone();
            super::core::cancel_promise(lua, &cell)
        })?,
    )?;
    methods.set_readonly(true);
    lua.set_named_registry_value(METHODS_KEY, methods)
}

/// The `await` the prelude defines (`task.await`), for bindings that park a task on a promise
/// from Luau code of their own.
pub(crate) fn await_function(lua: &Lua) -> mlua::Result<Function> {
    lua.named_registry_value::<Table>(METHODS_KEY)?
        .raw_get("await")
}

/// The promise behind a Luau value, if it is a `PromiseHandle`.
pub(crate) fn promise_of(value: &Value) -> Option<Rc<PromiseCell>> {
    let ud: &AnyUserData = value.as_userdata()?;
    ud.borrow::<PromiseHandle>().ok().map(|h| h.0.clone())
}

/// Makes the Luau handle of a promise.
pub(crate) fn handle(lua: &Lua, cell: Rc<PromiseCell>) -> mlua::Result<AnyUserData> {
    lua.create_userdata(PromiseHandle(cell))
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
