//! One Luau VM with its scheduler, promises and module cache.
//!
//! A [`Vm`] is built on the thread that runs it, from a [`Plan`], and dies there: `mlua::Lua`
//! stays `!Send`. The Rust side of the VM ([`VmCore`]) is reachable from Luau callbacks through
//! the VM's app data, so the `task` primitives and the `jobs` bindings find their scheduler without
//! any global.

use std::cell::{Cell, OnceCell, RefCell};
use std::ffi::c_void;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mlua::{Function, Lua, MultiValue, Table, Thread, Value};

use super::budget;
use super::luau_promise::{self, Outcome, PromiseCell, Promises};
use super::native;
use super::out_of_memory::{self, is_memory_error, MemoryLabel};
use super::owner::{Owner, TaskFailure};
use super::plan::Plan;
use super::promise_handle::{self, HandleTables};
use super::raised::raised_text;
use super::scheduler::{self, Resume, Scheduler, SchedulerVm, TaskId};
use super::signal_waits::SignalKind;
use super::task_library::{self, POOL_PROMISES};
use crate::principal::capability::Authority;
use crate::principal::profile::ProfileSink;
use crate::value::Message;

/// Where a VM sends failures of tasks that have no one awaiting them.
pub(crate) type Reporter = Box<dyn Fn(&str, &TaskFailure)>;

/// The Rust side of one VM.
pub(crate) struct VmCore {
    pub(super) sched: RefCell<Scheduler>,
    pub(crate) promises: RefCell<Promises>,
    pub(crate) modules: super::modules::Modules,
    reporter: Reporter,
    traceback: Function,
    /// Owner of tasks started outside any task (by host code).
    ambient: Rc<Owner>,
    /// The authority of tasks whose owner carries none: the grant of the principal the VM
    /// serves. Set once, after the VM is built.
    authority: OnceCell<Arc<Authority>>,
    /// The token that, once set, stops every run of this VM (see [`budget::RunTokens`]): a pool
    /// worker's VM has its principal's, set when the generation ends. Set once, after the VM
    /// is built.
    halt: OnceCell<Arc<budget::CancelToken>>,
    /// Where each run of this VM's tasks goes as a [`ProfileKind::EngineRun`] span: set for a
    /// profiled domain's engine VM only (a pool item and an actor call have events of their
    /// own). Set once, after the VM is built.
    ///
    /// [`ProfileKind::EngineRun`]: crate::profile::ProfileKind::EngineRun
    profile: OnceCell<Arc<dyn ProfileSink>>,
    /// The owner whose root task [`Vm::call`] is running for its first run, and its result once
    /// it ends there: the end is handed back to the caller instead of a completion.
    catching: RefCell<Option<Catch>>,
    /// Who the VM is in out-of-memory texts, and whether it reached its limit.
    pub(super) memory: MemoryLabel,
    /// How many tasks may wait on pool work at once: set for pool workers' VMs, whose waiting
    /// jobs are nested on their thread (see `Plan::nested_wait_limit`).
    pub(super) pool_wait_limit: Cell<Option<usize>>,
    /// The tables behind this VM's promise handles, set when the `task` library is installed.
    pub(crate) handles: OnceCell<HandleTables>,
    /// The buffer a drain collects settlements in ([`Vm::settle_buffer`]).
    settle_spare: Cell<Vec<(luau_promise::PromiseId, Outcome)>>,
    /// The last rejection an await raised, and the stack of the job it came from: an await
    /// raises the failure's text alone (what a `pcall` compares with the docs), and a task that
    /// fails with that text unchanged is reported with the job's stack after it.
    last_rejection: RefCell<Option<(String, String)>>,
}

impl VmCore {
    /// Keeps the stack of the rejection an await raises as `text` (see `last_rejection`).
    pub(super) fn remember_rejection(&self, text: &str, stack: &str) {
        *self.last_rejection.borrow_mut() =
            (!stack.is_empty()).then(|| (text.to_owned(), stack.to_owned()));
    }
}

/// The capacity of the settle buffer kept between drains.
const SETTLE_BUFFER_KEPT: usize = 256;

/// The root task a [`Vm::call`] watches through its first run.
struct Catch {
    owner: *const Owner,
    result: Option<Result<MultiValue, TaskFailure>>,
}

/// How the first run of a [`Vm::call`] left its task.
pub(crate) enum FirstRun {
    /// The task ended in it: returned (with its values) or failed.
    Ended(Result<MultiValue, TaskFailure>),
    /// The task yielded and goes on; its end reaches its owner's completion, which the caller
    /// sets now ([`Owner::set_completion`]).
    Suspended,
}

/// A fresh Luau state made ahead of the VM that will be built on it: `mlua::Lua::new`, about
/// two thirds of a worker VM's build, done while its thread has nothing else to do (see
/// [`Vm::build_on`]). It holds only what `Lua::new` makes: the standard libraries and mlua's
/// registry, no script and no memory limit yet.
pub(crate) struct Spare(Lua);

impl Spare {
    pub(crate) fn new() -> Spare {
        Spare(Lua::new())
    }
}

/// A Luau VM built from a [`Plan`] with Skein's prelude.
pub(crate) struct Vm {
    pub(crate) lua: Lua,
    pub(crate) core: Rc<VmCore>,
}

impl Vm {
    /// Builds a VM on this thread: sandbox, memory limit, prelude (`task`, `require`), the
    /// plan's host functions, then `install` (the `jobs` bindings of the layer above).
    pub(crate) fn build(
        plan: &Plan,
        reporter: Reporter,
        ambient_deadline: Duration,
        install: impl FnOnce(&Lua) -> mlua::Result<()>,
    ) -> mlua::Result<Vm> {
        Self::build_on(None, plan, reporter, ambient_deadline, install)
    }

    /// [`build`](Self::build) on `spare`'s state when there is one, on a new state otherwise:
    /// the VM is the same either way.
    pub(crate) fn build_on(
        spare: Option<Spare>,
        plan: &Plan,
        reporter: Reporter,
        ambient_deadline: Duration,
        install: impl FnOnce(&Lua) -> mlua::Result<()>,
    ) -> mlua::Result<Vm> {
        let lua = match spare {
            Some(Spare(lua)) => lua,
            None => Lua::new(),
        };
        native::install(&lua, plan.native_mode());
        budget::prepare();
        let globals = lua.globals();
        // mlua adds these; Skein loads modules only through its own loader and never runs
        // untrusted bytecode or strings.
        globals.raw_set("loadstring", Value::Nil)?;
        globals.raw_set("require", Value::Nil)?;
        // `setfenv` would let a script swap the environment of Skein's own Luau functions
        // (`task.await`, the prelude) for every later job of the VM, and both cost the VM its
        // fast paths; Luau deprecates them.
        globals.raw_set("setfenv", Value::Nil)?;
        globals.raw_set("getfenv", Value::Nil)?;
        let debug: Table = globals.raw_get("debug")?;
        let traceback: Function = debug.raw_get("traceback")?;
        let memory = MemoryLabel::new(&lua, plan.memory_limit_bytes())?;
        let core = Rc::new(VmCore {
            sched: RefCell::new(Scheduler::default()),
            promises: RefCell::new(Promises::default()),
            modules: super::modules::Modules::new(
                plan.root_dir().to_owned(),
                plan.fixed_project(),
                plan.builtin_modules().clone(),
            ),
            reporter,
            traceback,
            ambient: Rc::new(Owner::new(
                std::sync::Arc::new("host"),
                ambient_deadline,
                None,
            )),
            authority: std::cell::OnceCell::new(),
            halt: OnceCell::new(),
            profile: OnceCell::new(),
            catching: RefCell::new(None),
            last_rejection: RefCell::new(None),
            memory,
            pool_wait_limit: Cell::new(None),
            handles: OnceCell::new(),
            settle_spare: Cell::new(Vec::new()),
        });
        lua.set_app_data(core.clone());
        out_of_memory::install_collectgarbage(&lua, &core.memory)?;
        super::os_time::install(&lua)?;
        super::caught_error::install_resume(&lua)?;
        task_library::install(&lua)?;
        super::modules::install_require(&lua)?;
        plan.install(&lua)?;
        install(&lua)?;
        lua.set_memory_limit(core.memory.allocator_limit())?;
        lua.sandbox(true)?;
        Ok(Vm { lua, core })
    }

    /// Starts `f(args)` as the root task of `owner` and runs it to its first yield.
    pub(crate) fn start(
        &self,
        f: Function,
        args: MultiValue,
        owner: Rc<Owner>,
    ) -> mlua::Result<()> {
        self.start_with(f, Resume::Args(args), owner)
    }

    /// [`start`](Self::start) with its first resume given.
    pub(crate) fn start_with(
        &self,
        f: Function,
        first: Resume,
        owner: Rc<Owner>,
    ) -> mlua::Result<()> {
        let idle = self.core.sched.borrow_mut().take_idle_thread();
        let thread = match idle {
            Some(thread) => {
                thread.reset(f)?;
                thread
            }
            None => self.lua.create_thread(f)?,
        };
        let id = self.core.sched.borrow_mut().add(thread, owner, true);
        scheduler::resume_task(&*self.core, &self.lua, id, first);
        Ok(())
    }

    /// Calls `f(args)` as the root task of `owner` (made without a completion) and runs it to
    /// its first yield, answering how that run ended: a handler that returns at once costs
    /// no completion closure and no shared state. A task that yields goes on as any task does.
    pub(crate) fn call(
        &self,
        f: Function,
        args: MultiValue,
        owner: Rc<Owner>,
    ) -> mlua::Result<FirstRun> {
        let catch = Catch {
            owner: Rc::as_ptr(&owner),
            result: None,
        };
        // Calls nest (a handler's first run may reach host code that calls another): each
        // keeps the outer one's watch and puts it back.
        let outer = self.core.catching.replace(Some(catch));
        let started = self.start(f, args, owner);
        let caught = self.core.catching.replace(outer);
        started?;
        Ok(match caught.and_then(|c| c.result) {
            Some(result) => FirstRun::Ended(result),
            None => FirstRun::Suspended,
        })
    }

    /// Sets the authority the VM's tasks run under when their owner carries none. A VM serves
    /// one principal for its whole life, so it is set once; a second call changes nothing.
    pub(crate) fn set_authority(&self, authority: Arc<Authority>) {
        let _ = self.core.authority.set(authority);
    }

    /// Sets the sink each run of the VM's tasks is profiled to, as an engine VM's runs are. Set
    /// once; a second call changes nothing.
    pub(crate) fn set_profile(&self, sink: Arc<dyn ProfileSink>) {
        let _ = self.core.profile.set(sink);
    }

    /// Sets the token that stops every run of the VM once it is set, whichever job the run
    /// belongs to. Set once; a second call changes nothing.
    pub(crate) fn set_halt(&self, halt: Arc<budget::CancelToken>) {
        let _ = self.core.halt.set(halt);
    }

    /// Runs one scheduler step; answers whether any task ran.
    pub(crate) fn step(&self) -> bool {
        self.step_counted() > 0
    }

    /// [`step`](Self::step), answering how many tasks it resumed.
    pub(crate) fn step_counted(&self) -> usize {
        scheduler::step(&*self.core, &self.lua)
    }

    /// Resumes the tasks that are ready now and whose owner `of` picks, and no other task,
    /// timer or deferred work (`scheduler::resume_ready_of`); answers whether any task ran.
    pub(crate) fn resume_ready_of(&self, of: impl FnMut(&Rc<Owner>) -> bool) -> bool {
        scheduler::resume_ready_of(&*self.core, &self.lua, of)
    }

    /// Settles a promise homed here with the outcome a reply brought (a mailbox event, a worker
    /// message, an actor's wake), writes its handle and queues its waiters; a reply for a
    /// promise no longer pending is dropped.
    pub(crate) fn settle_reply(&self, id: luau_promise::PromiseId, outcome: Outcome) {
        self.core.settle_if_pending(&self.lua, id, outcome);
    }

    /// Settles each promise of `batch` in order, as [`settle_reply`](Self::settle_reply) would one
    /// by one, and empties it: the outcomes that need nothing built in the VM (scalars,
    /// rejections, cancellations) are written into their handles under one look-up of the table
    /// of handles.
    pub(crate) fn settle_all(&self, batch: &mut Vec<(luau_promise::PromiseId, Outcome)>) {
        if !batch.is_empty() {
            promise_handle::settle_batch(&self.lua, &self.core, batch);
        }
    }

    /// A buffer for [`settle_all`](Self::settle_all), reused across drains; give it back with
    /// [`keep_settle_buffer`](Self::keep_settle_buffer).
    pub(crate) fn settle_buffer(&self) -> Vec<(luau_promise::PromiseId, Outcome)> {
        self.core.settle_spare.take()
    }

    /// Keeps an emptied buffer for the next drain (a small one: a burst's is let go).
    pub(crate) fn keep_settle_buffer(&self, mut buffer: Vec<(luau_promise::PromiseId, Outcome)>) {
        buffer.clear();
        buffer.shrink_to(SETTLE_BUFFER_KEPT);
        self.core.settle_spare.set(buffer);
    }

    /// Frees the promises whose handles were collected (their jobs' charges go back).
    pub(crate) fn free_collected_promises(&self) {
        promise_handle::free_collected(&self.lua, &self.core);
    }

    /// Whether a task waits on a promise of pool work.
    pub(crate) fn waits_on_pool(&self) -> bool {
        self.core.sched.borrow().pool_waits() > 0
    }

    /// Whether a task can run now.
    pub(crate) fn has_ready(&self) -> bool {
        self.core.sched.borrow().has_ready()
    }

    /// Moves the timers' clock on by a frame's `dt`; from the first call on, this VM's timers
    /// follow frame time (`Scheduler::advance_clock`).
    pub(crate) fn advance_clock(&self, dt: Duration) {
        self.core.sched.borrow_mut().advance_clock(dt);
    }

    /// On frame time, moves the clock on by the wall time since `waited_from` (what a
    /// blocking pump waited).
    pub(crate) fn add_waited(&self, waited_from: Instant) {
        self.core.sched.borrow_mut().add_waited(waited_from);
    }

    /// Releases the tasks waiting on the signal `name` of `kind` that may take the event
    /// numbered `seq`, with `payload`; answers how many.
    pub(crate) fn release_signal(
        &self,
        kind: SignalKind,
        name: &str,
        seq: u64,
        payload: &Message,
    ) -> usize {
        self.core
            .sched
            .borrow_mut()
            .release_signal(kind, name, seq, payload)
    }

    /// The smallest `since` of the tasks waiting on signals of `kind`, if any wait.
    pub(crate) fn signal_waits_since(&self, kind: SignalKind) -> Option<u64> {
        self.core.sched.borrow().signal_waits_since(kind)
    }

    /// Whether a task of this VM waits on a signal.
    pub(crate) fn has_signal_waits(&self) -> bool {
        self.core.sched.borrow().has_signal_waits()
    }

    /// The earliest live timer.
    pub(crate) fn next_wake(&self) -> Option<Instant> {
        self.core.sched.borrow_mut().next_wake()
    }

    /// Live tasks.
    pub(crate) fn tasks(&self) -> usize {
        self.core.sched.borrow().len()
    }

    /// Queues the tasks waiting on frames that `frame` has reached. Answers whether any woke.
    pub(crate) fn wake_frames(&self, frame: u64) -> bool {
        let mut sched = self.core.sched.borrow_mut();
        sched.has_frame_waits() && sched.wake_frames(frame)
    }

    /// Whether a task of this VM waits on frames.
    pub(crate) fn has_frame_waits(&self) -> bool {
        self.core.sched.borrow().has_frame_waits()
    }

    /// Ends every task of `owner` without resuming it again, and cancels the pool work that
    /// only those tasks awaited: a cancelled job stops what it waits on, so work that nests (a
    /// `parallelFor` over itself) ends with the job above it instead of running on unawaited.
    pub(crate) fn drop_owner(&self, owner: &Rc<Owner>) {
        let (ids, threads) = self.core.sched.borrow_mut().remove_owner(owner);
        drop(threads);
        if !ids.is_empty() {
            let cancelled = self
                .core
                .promises
                .borrow_mut()
                .cancel_awaited_only_by(&ids, &POOL_PROMISES);
            for settled in cancelled {
                // Their waiters are the tasks just ended: waking them finds nothing to run.
                promise_handle::publish(&self.lua, &self.core, settled);
            }
        }
    }
}

impl VmCore {
    /// The core of the VM a callback runs in.
    pub(crate) fn of(lua: &Lua) -> mlua::Result<Rc<VmCore>> {
        lua.app_data_ref::<Rc<VmCore>>()
            .map(|c| c.clone())
            .ok_or_else(|| mlua::Error::runtime("skein: this VM has no scheduler"))
    }

    /// Names the VM in its out-of-memory texts ("the engine VM", "the VM of worker 2"). The
    /// layer that builds the VM calls it from its install step, before the memory limit is set.
    pub(crate) fn name_vm(&self, lua: &Lua, name: String) -> mlua::Result<()> {
        self.memory.set_name(lua, name)
    }

    /// Bounds how many of this VM's tasks may wait on pool work at once (a pool worker's VM).
    pub(crate) fn limit_pool_waits(&self, tasks: usize) {
        self.pool_wait_limit.set(Some(tasks));
    }

    /// Whether an out-of-memory error of this VM reached Rust: the VM reached its limit, and
    /// what holds its memory may still be alive (tasks, module state).
    pub(crate) fn hit_memory_limit(&self) -> bool {
        self.memory.was_hit()
    }

    /// `out of memory: <this VM> reached its memory limit of <limit>`.
    pub(crate) fn out_of_memory_text(&self) -> String {
        self.memory.text(None)
    }

    /// `err` as a callback returns it: an out-of-memory error becomes a runtime error naming
    /// this VM, its limit and what was being made, which a script's `pcall` catches as text.
    pub(crate) fn named_error(&self, err: mlua::Error, making: &str) -> mlua::Error {
        if is_memory_error(&err) {
            mlua::Error::runtime(self.memory.hit(Some(making)))
        } else {
            err
        }
    }

    /// Reports a failure that no task's owner can carry (a watcher that could not start).
    pub(crate) fn report_failure(&self, label: &str, message: &str) {
        (self.reporter)(
            label,
            &TaskFailure::raised(message.to_owned(), String::new()),
        );
    }

    /// Reports a task's failure under `label`, as a task no one awaits is reported.
    pub(crate) fn report(&self, label: &str, failure: &TaskFailure) {
        (self.reporter)(label, failure);
    }

    /// Queues the tasks that awaited a promise: each reads the outcome from the promise's
    /// handle when it resumes.
    pub(crate) fn wake(&self, waiters: Vec<TaskId>) {
        if waiters.is_empty() {
            return;
        }
        let mut sched = self.sched.borrow_mut();
        for waiter in waiters {
            sched.make_ready(waiter, Resume::Args(MultiValue::new()));
        }
    }

    /// The task of the Luau thread at `address`, if the scheduler knows it.
    pub(crate) fn task_at(&self, address: *const c_void) -> Option<TaskId> {
        self.sched.borrow_mut().task_at(address)
    }

    /// Whether this VM's tasks wait on pool work as many times as its limit allows.
    pub(crate) fn pool_wait_limited(&self) -> bool {
        self.pool_wait_limit
            .get()
            .is_some_and(|limit| self.sched.borrow().pool_waits() >= limit)
    }

    /// The owner of the running task, or the ambient owner outside tasks.
    pub(crate) fn current_owner(&self) -> Rc<Owner> {
        let sched = self.sched.borrow();
        sched
            .running()
            .and_then(|id| sched.owner(id))
            .unwrap_or_else(|| self.ambient.clone())
    }

    /// The task the calling Luau code runs in, registered if the scheduler has not seen it.
    pub(crate) fn current_task(&self, lua: &Lua) -> TaskId {
        self.task_for(&lua.current_thread())
    }

    /// Whether a task is still live: a parked task that was cancelled or ended is not.
    pub(crate) fn task_alive(&self, id: TaskId) -> bool {
        self.sched.borrow().is_live(id)
    }

    /// Settles a promise homed here, writes its outcome into its handle and queues its
    /// waiters; false when it was not pending.
    pub(crate) fn settle_if_pending(
        &self,
        lua: &Lua,
        id: luau_promise::PromiseId,
        outcome: Outcome,
    ) -> bool {
        let settled = self.promises.borrow_mut().settle(id, outcome);
        match settled {
            Some(settled) => {
                promise_handle::publish(lua, self, settled);
                true
            }
            None => false,
        }
    }

    /// The task of `thread`, registering a coroutine the scheduler has not seen (one made with
    /// `coroutine.create` inside a task) under the running task's owner.
    pub(super) fn task_for(&self, thread: &Thread) -> TaskId {
        if let Some(id) = self.sched.borrow_mut().task_of(thread) {
            return id;
        }
        let owner = self.current_owner();
        self.sched.borrow_mut().add(thread.clone(), owner, false)
    }
}

impl SchedulerVm for VmCore {
    fn scheduler(&self) -> &RefCell<Scheduler> {
        &self.sched
    }

    fn resume_values(&self, lua: &Lua, resume: Resume) -> MultiValue {
        match resume {
            Resume::Args(args) => args,
            Resume::Elapsed(start) => {
                let secs = scheduler::elapsed_secs(start, self.sched.borrow().now());
                MultiValue::from_iter([Value::Number(secs)])
            }
            Resume::Frames(n) => MultiValue::from_iter([Value::Number(n as f64)]),
            Resume::Signal(payload) => match payload.to_lua(lua) {
                Ok(value) => MultiValue::from_iter([value]),
                Err(e) => MultiValue::from_iter([
                    Value::Nil,
                    Value::String(
                        lua.create_string(format!(
                            "its payload could not be read: {}",
                            super::error_message(&e)
                        ))
                        .unwrap_or_else(|_| self.memory.outcome_text()),
                    ),
                ]),
            },
            Resume::Timeout => {
                let text = lua
                    .create_string("timeout")
                    .unwrap_or_else(|_| self.memory.outcome_text());
                MultiValue::from_iter([Value::Nil, Value::String(text)])
            }
        }
    }

    fn complete(&self, lua: &Lua, owner: &Rc<Owner>, result: Result<MultiValue, TaskFailure>) {
        {
            let mut catching = self.catching.borrow_mut();
            if let Some(catch) = catching.as_mut() {
                if std::ptr::eq(catch.owner, Rc::as_ptr(owner)) && catch.result.is_none() {
                    catch.result = Some(result);
                    return;
                }
            }
        }
        owner.complete(lua, result);
    }

    fn report(&self, owner: &Rc<Owner>, failure: TaskFailure) {
        (self.reporter)(&owner.identity.to_string(), &failure);
    }

    fn out_of_memory(&self) -> String {
        self.memory.hit(None)
    }

    fn collect_when_full(&self, lua: &Lua) {
        self.memory.collect_when_full(lua);
    }

    fn authority(&self) -> Option<&Arc<Authority>> {
        self.authority.get()
    }

    fn halt(&self) -> Option<&budget::CancelToken> {
        self.halt.get().map(|t| &**t)
    }

    fn profile(&self) -> Option<&Arc<dyn ProfileSink>> {
        self.profile.get()
    }

    fn raised_text(&self, lua: &Lua, thread: &Thread, message: &str) -> Option<String> {
        if let Some(text) = raised_text(lua, thread, message) {
            return Some(text);
        }
        let last = self.last_rejection.borrow();
        let (text, stack) = last.as_ref()?;
        (text == message).then(|| format!("{message}\n{stack}"))
    }

    fn traceback(&self, thread: &Thread) -> String {
        self.traceback
            .call::<String>((thread.clone(),))
            .map(|tb| tb.trim_end().to_owned())
            .unwrap_or_default()
    }
}

/// Closes the VM's globals: from now on no Luau code may set a global (`x = 1` raises
/// `attempt to modify a readonly table`), except a module's top level while `require` runs it
/// and Skein's own installs, both through [`with_open_globals`]. A worker VM's globals are
/// closed once it is built, so what one job leaves in them can't change what the next job on
/// that VM computes; state that should last lives in modules.
pub(crate) fn close_globals(lua: &Lua) {
    lua.globals().set_readonly(true);
    // The sandbox made the globals a safe environment, and no script has run in them yet.
    lua.set_app_data(SafeGlobals);
}

/// Runs `f` with the VM's globals open if they were closed, closing them again after, even if
/// `f` unwinds. `f` must not yield to other tasks (a module body and an install never do).
///
/// Opening the globals costs them Luau's *safe environment* flag (mlua clears it with the
/// read-only flag), and without it a VM runs neither builtin fast calls nor native code. So the
/// flag comes back when the globals are closed again, if `f` only added globals (a service
/// stub, a module's new global) and changed none: what the flag promises Luau (a global it
/// resolved when a chunk loaded still has that value) holds then, and a global that was nil at
/// load is looked up when it runs. A body that replaced or removed a global, or shadowed a
/// library (`math = ...`), leaves the flag off for the rest of the VM's life.
pub(crate) fn with_open_globals<R>(lua: &Lua, f: impl FnOnce() -> R) -> R {
    struct Reclose<'a> {
        lua: &'a Lua,
        opened: Option<(Table, Option<GlobalPairs>)>,
    }
    impl Drop for Reclose<'_> {
        fn drop(&mut self) {
            if let Some((globals, before)) = self.opened.take() {
                globals.set_readonly(true);
                if before.is_some_and(|before| only_added(&globals, &before)) {
                    restore_safe_env(self.lua, &globals);
                } else {
                    self.lua.remove_app_data::<SafeGlobals>();
                }
            }
        }
    }
    let globals = lua.globals();
    let _reclose = if globals.is_readonly() {
        // Only globals the sandbox left safe are worth remembering: once a global was set, the
        // flag stays off.
        let before = lua
            .app_data_ref::<SafeGlobals>()
            .is_some()
            .then(|| pairs_of(&globals))
            .flatten();
        if before.is_none() {
            lua.remove_app_data::<SafeGlobals>();
        }
        globals.set_readonly(false);
        Reclose {
            lua,
            opened: Some((globals, before)),
        }
    } else {
        Reclose { lua, opened: None }
    };
    f()
}

/// The globals' own entries, to see what opening them changed.
type GlobalPairs = Vec<(Value, Value)>;

/// Present (as app data) while the VM's closed globals still carry the sandbox's safe flag.
struct SafeGlobals;

/// The most globals whose change is checked; a VM with more gives up the safe environment.
const MAX_CHECKED_GLOBALS: usize = 512;

/// Whether the globals hold every entry of `before` unchanged (same type, same value) and
/// whatever else they hold is new: a name the sandbox's libraries behind them do not have.
fn only_added(globals: &Table, before: &GlobalPairs) -> bool {
    let Some(after) = pairs_of(globals) else {
        return false;
    };
    let same = |a: &Value, b: &Value| a.type_name() == b.type_name() && a == b;
    let libraries: Option<Table> = globals
        .metatable()
        .and_then(|mt| mt.raw_get::<Option<Table>>("__index").ok().flatten());
    let kept = before
        .iter()
        .all(|(k, v)| after.iter().any(|(k2, v2)| same(k, k2) && same(v, v2)));
    let added_are_new = after
        .iter()
        .filter(|(k, _)| !before.iter().any(|(k2, _)| same(k, k2)))
        .all(|(k, _)| match &libraries {
            Some(libraries) => libraries
                .raw_get::<Value>(k.clone())
                .is_ok_and(|v| v.is_nil()),
            None => true,
        });
    kept && added_are_new
}

/// The globals' own entries (not the sandbox's libraries behind them), or `None` if they could
/// not be read or are too many to compare.
fn pairs_of(globals: &Table) -> Option<GlobalPairs> {
    let pairs = globals
        .pairs::<Value, Value>()
        .take(MAX_CHECKED_GLOBALS + 1)
        .collect::<mlua::Result<Vec<_>>>()
        .ok()?;
    (pairs.len() <= MAX_CHECKED_GLOBALS).then_some(pairs)
}

/// Sets Luau's safe-environment flag on the globals again.
fn restore_safe_env(lua: &Lua, globals: &Table) {
    // SAFETY: `exec_raw` pushes `globals` (a table) on a stack it restores; `lua_setsafeenv`
    // only sets a flag of the table at the index.
    let restored = unsafe {
        lua.exec_raw::<()>(globals, |state| {
            mlua::ffi::lua_setsafeenv(state, -1, 1);
        })
    };
    if restored.is_err() {
        lua.remove_app_data::<SafeGlobals>();
    }
}

/// `PromiseHandle:cancel()`: settles the promise as cancelled and stops its work.
pub(crate) fn cancel_promise(lua: &Lua, cell: &Rc<PromiseCell>) -> mlua::Result<bool> {
    let core = VmCore::of(lua)?;
    let settled = core.promises.borrow_mut().cancel(cell);
    match settled {
        Some(settled) => {
            promise_handle::publish(lua, &core, settled);
            Ok(true)
        }
        None => Ok(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vm() -> Vm {
        Vm::build(
            &Plan::new(),
            Box::new(|_, _| {}),
            Duration::from_secs(5),
            |_| Ok(()),
        )
        .unwrap()
    }

    fn owner() -> Rc<Owner> {
        Rc::new(Owner::new(
            std::sync::Arc::new("test"),
            Duration::from_secs(5),
            None,
        ))
    }

    #[test]
    fn a_call_hands_back_an_end_in_its_first_run_and_a_yield_goes_on_to_the_completion() {
        let vm = vm();
        let f: Function = vm
            .lua
            .load(
                "return function(x)
                    if x == 'fail' then error('boom') end
                    if x == 'yield' then coroutine.yield() return 'later' end
                    return x, 2
                end",
            )
            .eval()
            .unwrap();
        let arg =
            |s: &str| MultiValue::from_iter([Value::String(vm.lua.create_string(s).unwrap())]);

        let FirstRun::Ended(Ok(values)) = vm.call(f.clone(), arg("back"), owner()).unwrap() else {
            panic!("a returning call ends in its first run");
        };
        assert_eq!(values.len(), 2);
        assert_eq!(values[0].to_string().unwrap(), "back");
        assert_eq!(values[1], Value::Integer(2));

        let FirstRun::Ended(Err(TaskFailure::Raised { message, .. })) =
            vm.call(f.clone(), arg("fail"), owner()).unwrap()
        else {
            panic!("a raising call ends in its first run");
        };
        assert!(message.contains("boom"), "{message}");
        assert_eq!(vm.tasks(), 0);

        let yielding = owner();
        let first = vm.call(f, arg("yield"), yielding.clone()).unwrap();
        assert!(matches!(first, FirstRun::Suspended));
        assert_eq!(vm.tasks(), 1);
        let seen = Rc::new(RefCell::new(None));
        let sink = seen.clone();
        yielding.set_completion(Box::new(move |_, result, _| {
            *sink.borrow_mut() = Some(result.map(|values| values.len()));
        }));
        while vm.step() {}
        assert_eq!(*seen.borrow(), Some(Ok(1)));
        assert_eq!(vm.tasks(), 0);
        // The watch is over: a later start completes through its owner's completion.
        let later = owner();
        let done = Rc::new(RefCell::new(false));
        let mark = done.clone();
        later.set_completion(Box::new(move |_, _, _| *mark.borrow_mut() = true));
        let g: Function = vm.lua.load("return function() end").eval().unwrap();
        vm.start(g, MultiValue::new(), later).unwrap();
        assert!(*done.borrow());
    }

    #[test]
    fn a_vm_lets_as_many_tasks_wait_on_pool_work_as_its_limit_and_refuses_one_more() {
        let vm = vm();
        vm.core.limit_pool_waits(2);
        let awaiter: Function = vm
            .lua
            .load("return function(p) return pcall(function() return p:await() end) end")
            .eval()
            .unwrap();
        let awaits = |what: &'static str, owner: Rc<Owner>| {
            let cell = vm.core.promises.borrow_mut().make(what);
            let handle = promise_handle::handle(&vm.lua, cell.clone()).unwrap();
            let args = MultiValue::from_iter([handle]);
            (vm.call(awaiter.clone(), args, owner).unwrap(), cell)
        };
        let first = owner();
        let (run, first_cell) = awaits("jobs.dispatch", first.clone());
        assert!(matches!(run, FirstRun::Suspended));
        let (run, _) = awaits("jobs.parallelFor", owner());
        assert!(matches!(run, FirstRun::Suspended));
        assert_eq!(vm.core.sched.borrow().pool_waits(), 2);
        // One past the limit: refused, and the work it refused to wait on is cancelled.
        let (run, refused_cell) = awaits("jobs.dispatch", owner());
        let FirstRun::Ended(Ok(values)) = run else {
            panic!("the refused await raises in its first run");
        };
        assert_eq!(values[0], Value::Boolean(false));
        let raised = values[1].to_string().unwrap();
        assert_eq!(
            raised,
            "task.await: nested waits past the limit: 2 tasks of the VM already wait on pool \
             work, and 2 may (Plan::nested_wait_limit); work that awaits work of its own kind \
             without end stops here"
        );
        assert_eq!(refused_cell.status(), "cancelled");
        // Awaits of other promises are not pool work: they park past the limit.
        let (run, _) = awaits("SharedQueue:pop", owner());
        assert!(matches!(run, FirstRun::Suspended));
        assert_eq!(vm.core.sched.borrow().pool_waits(), 2);
        // Dropping a waiting job frees its place and cancels the work only it awaited.
        vm.drop_owner(&first);
        assert_eq!(vm.core.sched.borrow().pool_waits(), 1);
        assert_eq!(first_cell.status(), "cancelled");
        let (run, _) = awaits("jobs.dispatch", owner());
        assert!(matches!(run, FirstRun::Suspended));
        assert_eq!(vm.core.sched.borrow().pool_waits(), 2);
    }

    #[test]
    fn a_root_task_is_found_while_it_runs_and_once_it_waits() {
        let vm = vm();
        let f: Function = vm
            .lua
            .load("return function() parked = coroutine.running() task.wait(0) ended = true end")
            .eval()
            .unwrap();
        let first = vm.call(f, MultiValue::new(), owner()).unwrap();
        assert!(matches!(first, FirstRun::Suspended));
        // `task.wait` found the running root task: no second task was registered for it.
        assert_eq!(vm.tasks(), 1);
        // Once suspended it is indexed by its thread, so `task.cancel` reaches it.
        let cancel: Function = vm
            .lua
            .load("return function() task.cancel(parked) end")
            .eval()
            .unwrap();
        vm.start(cancel, MultiValue::new(), owner()).unwrap();
        assert_eq!(vm.tasks(), 0);
        while vm.step() {}
        let globals = vm.lua.globals();
        assert!(matches!(
            globals.get::<Value>("parked").unwrap(),
            Value::Thread(_)
        ));
        assert_eq!(globals.get::<Value>("ended").unwrap(), Value::Nil);
    }
}
