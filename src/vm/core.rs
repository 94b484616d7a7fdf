//! One Luau VM with its scheduler, promises and module cache.
//!
//! A [`Vm`] is built on the thread that runs it, from a [`Plan`], and dies there: `mlua::Lua`
//! stays `!Send`. The Rust side of the VM ([`VmCore`]) is reachable from Luau callbacks through
//! the VM's app data, so the `task` primitives and the `jobs` bindings find their scheduler without
//! any global.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

use mlua::{Function, Lua, MultiValue, Table, Thread, Value, Variadic};

use super::budget;
use super::embedded::Embedded;
use super::luau_promise::{self, AwaitedValue, Outcome, PromiseCell, Promises};
use super::out_of_memory::{is_memory_error, MemoryLabel};
use super::owner::{Owner, TaskFailure};
use super::plan::Plan;
use super::raised::{raised_text, RAISED_KEY};
use super::scheduler::{self, Resume, ResumeArgs, Scheduler, SchedulerHost, TaskId, MAX_WAIT};

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
    authority: std::cell::OnceCell<std::sync::Arc<crate::principal::capability::Authority>>,
    /// The owner whose root task [`Vm::call`] is running for its first run, and its result once
    /// it ends there: the end is handed back to the caller instead of a completion.
    catching: RefCell<Option<Catch>>,
    /// Who the VM is in out-of-memory texts, and whether it reached its limit.
    memory: MemoryLabel,
    /// How many tasks may wait on pool work at once: set for pool workers' VMs, whose waiting
    /// jobs are nested on their thread (see `Plan::nested_wait_limit`).
    pool_wait_limit: Cell<Option<usize>>,
}

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
        let lua = Lua::new();
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
            catching: RefCell::new(None),
            memory,
            pool_wait_limit: Cell::new(None),
        });
        lua.set_app_data(core.clone());
        install_task_library(&lua)?;
        super::modules::install_require(&lua)?;
        plan.install(&lua)?;
        install(&lua)?;
        lua.set_memory_limit(plan.memory_limit_bytes())?;
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

    /// [`start`](Self::start) with its first resume given: [`Resume::Message`] pushes a
    /// top-level integer exactly.
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
    pub(crate) fn set_authority(
        &self,
        authority: std::sync::Arc<crate::principal::capability::Authority>,
    ) {
        let _ = self.core.authority.set(authority);
    }

    /// Runs one scheduler step; answers whether any task ran.
    pub(crate) fn step(&self) -> bool {
        scheduler::step(&*self.core, &self.lua)
    }

    /// Settles a promise homed here and queues its waiters.
    pub(crate) fn settle(&self, id: luau_promise::PromiseId, outcome: Outcome) {
        let woken = self.core.promises.borrow_mut().settle(id, outcome);
        if let Some((waiters, outcome)) = woken {
            self.core.wake(waiters, outcome);
        }
    }

    /// Whether a task can run now.
    pub(crate) fn has_ready(&self) -> bool {
        self.core.sched.borrow().has_ready(Instant::now)
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
            self.core
                .promises
                .borrow_mut()
                .cancel_awaited_only_by(&ids, &POOL_PROMISES);
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

    /// Queues the tasks that awaited a promise.
    pub(crate) fn wake(&self, waiters: Vec<TaskId>, outcome: Rc<Outcome>) {
        let mut sched = self.sched.borrow_mut();
        for waiter in waiters {
            sched.make_ready(waiter, Resume::Settled(outcome.clone()));
        }
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

    /// Settles a promise homed here and queues its waiters; false when it was not pending.
    pub(crate) fn settle(&self, id: luau_promise::PromiseId, outcome: Outcome) -> bool {
        let woken = self.promises.borrow_mut().settle(id, outcome);
        match woken {
            Some((waiters, outcome)) => {
                self.wake(waiters, outcome);
                true
            }
            None => false,
        }
    }

    /// The task of `thread`, registering a coroutine the scheduler has not seen (one made with
    /// `coroutine.create` inside a task) under the running task's owner.
    fn task_for(&self, thread: &Thread) -> TaskId {
        if let Some(id) = self.sched.borrow().task_of(thread) {
            return id;
        }
        let owner = self.current_owner();
        self.sched.borrow_mut().add(thread.clone(), owner, false)
    }
}

impl SchedulerHost for VmCore {
    fn scheduler(&self) -> &RefCell<Scheduler> {
        &self.sched
    }

    fn resume_values(&self, lua: &Lua, resume: Resume) -> ResumeArgs {
        match resume {
            Resume::Args(args) => ResumeArgs::Values(args),
            Resume::Message(message) => ResumeArgs::Message(message),
            Resume::Elapsed(start) => {
                let secs = scheduler::elapsed_secs(start, Instant::now());
                ResumeArgs::Values(MultiValue::from_iter([Value::Number(secs)]))
            }
            Resume::Settled(outcome) => {
                let (resolved, value) = outcome_pair(lua, self, &outcome);
                ResumeArgs::Settled(resolved, value)
            }
            Resume::Frames(n) => {
                ResumeArgs::Values(MultiValue::from_iter([Value::Number(n as f64)]))
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

    fn authority(&self) -> Option<&std::sync::Arc<crate::principal::capability::Authority>> {
        self.authority.get()
    }

    fn raised_text(&self, lua: &Lua, thread: &Thread, message: &str) -> Option<String> {
        raised_text(lua, thread, message)
    }

    fn traceback(&self, thread: &Thread) -> String {
        self.traceback
            .call::<String>((thread.clone(),))
            .map(|tb| tb.trim_end().to_owned())
            .unwrap_or_default()
    }
}

/// The kinds of promise the pool settles (their `what`): a warm entry may not await them.
const POOL_PROMISES: [&str; 3] = ["jobs.dispatch", "jobs.parallelFor", "jobs.warm"];

/// `(resolved, value)` as `task.await` receives them: `true` and the value, or `false` and the
/// error text. A boolean, not the status name, so an await makes no Luau string for the status
/// (each `create_string` from Rust is a protected call; about 1,900 instructions per await). The
/// value is pushed straight from its message, so a top-level integer stays an integer.
fn outcome_pair(lua: &Lua, core: &VmCore, outcome: &Rc<Outcome>) -> (Value, AwaitedValue) {
    let text = match &**outcome {
        Outcome::Resolved(_) => {
            return (
                Value::Boolean(true),
                AwaitedValue::Resolved(outcome.clone()),
            )
        }
        Outcome::Rejected(failure) => failure.to_string(),
        Outcome::Cancelled => "cancelled".to_owned(),
    };
    let (rejected, text) = rejected_pair(lua, core, &text);
    (rejected, AwaitedValue::Value(text))
}

/// `(false, text)`: the cold half of [`outcome_pair`]. A VM out of memory can't make the text:
/// the await raises the out-of-memory text the VM made while it had memory.
#[cold]
fn rejected_pair(lua: &Lua, core: &VmCore, text: &str) -> (Value, Value) {
    let text = match lua.create_string(text) {
        Ok(text) => text,
        Err(_) => core.memory.outcome_text(),
    };
    (Value::Boolean(false), Value::String(text))
}

/// Closes the VM's globals: from now on no Luau code may set a global (`x = 1` raises
/// `attempt to modify a readonly table`), except a module's top level while `require` runs it
/// and Skein's own installs, both through [`with_open_globals`]. A worker VM's globals are
/// closed once it is built, so what one job leaves in them can't change what the next job on
/// that VM computes; state that should last lives in modules.
pub(crate) fn close_globals(lua: &Lua) {
    lua.globals().set_readonly(true);
}

/// Runs `f` with the VM's globals open if they were closed, closing them again after, even if
/// `f` unwinds. `f` must not yield to other tasks (a module body and an install never do).
pub(crate) fn with_open_globals<R>(lua: &Lua, f: impl FnOnce() -> R) -> R {
    struct Reclose(Option<Table>);
    impl Drop for Reclose {
        fn drop(&mut self) {
            if let Some(globals) = &self.0 {
                globals.set_readonly(true);
            }
        }
    }
    let globals = lua.globals();
    let _reclose = if globals.is_readonly() {
        globals.set_readonly(false);
        Reclose(Some(globals))
    } else {
        Reclose(None)
    };
    f()
}

/// `PromiseHandle:cancel()`: settles the promise as cancelled and stops its work.
pub(crate) fn cancel_promise(lua: &Lua, cell: &Rc<PromiseCell>) -> mlua::Result<bool> {
    let core = VmCore::of(lua)?;
    let woken = core.promises.borrow_mut().cancel(cell);
    match woken {
        Some((waiters, outcome)) => {
            core.wake(waiters, outcome);
            Ok(true)
        }
        None => Ok(false),
    }
}

/// Refuses an await of pool work when as many of this VM's tasks wait on pool work as its
/// limit allows: a job that awaits work of its own kind without end stops here, and its failure
/// settles every promise above it. The caller cancels the work it refused to wait on.
fn refuse_past_pool_wait_limit(core: &VmCore) -> mlua::Result<()> {
    let Some(limit) = core.pool_wait_limit.get() else {
        return Ok(());
    };
    let waiting = core.sched.borrow().pool_waits();
    if waiting < limit {
        return Ok(());
    }
    Err(mlua::Error::runtime(format!(
        "task.await: nested waits past the limit: {waiting} tasks of {} already wait on pool \
         work, and {limit} may (Plan::nested_wait_limit); work that awaits work of its own kind \
         without end stops here",
        core.memory.vm_name()
    )))
}

/// Reads a wait time in seconds: nil is 0; negative and NaN are 0; huge values are clamped.
fn wait_duration(seconds: Option<f64>) -> Duration {
    match seconds {
        Some(s) if s > 0.0 => Duration::try_from_secs_f64(s)
            .unwrap_or(MAX_WAIT)
            .min(MAX_WAIT),
        _ => Duration::ZERO,
    }
}

/// The frame counter `task.waitFrames` counts: the domain's, bumped by its engine thread once per
/// frame. The `jobs` layer sets it as app data of every VM of a domain; a VM without it refuses
/// `task.waitFrames`.
#[derive(Clone)]
pub(crate) struct FrameClock(pub(crate) std::sync::Arc<std::sync::atomic::AtomicU64>);

/// Reads `task.waitFrames`'s count: a whole number of at least 1.
fn read_frame_count(n: &Value) -> mlua::Result<u64> {
    let refuse = |what: String| {
        mlua::Error::runtime(format!(
            "task.waitFrames: n must be a whole number of frames, 1 or more, got {what}"
        ))
    };
    match n {
        Value::Integer(i) if *i >= 1 => Ok(*i as u64),
        Value::Number(x) if x.fract() == 0.0 && *x >= 1.0 && *x < 9.0e15 => Ok(*x as u64),
        Value::Integer(i) => Err(refuse(i.to_string())),
        Value::Number(x) => Err(refuse(x.to_string())),
        other => Err(refuse(super::a_type(other))),
    }
}

/// A function or a thread, as `task.spawn` and friends take them.
fn as_thread(lua: &Lua, target: Value, what: &str) -> mlua::Result<Thread> {
    match target {
        Value::Function(f) => lua.create_thread(f),
        Value::Thread(t) => Ok(t),
        other => Err(mlua::Error::runtime(format!(
            "{what} expects a function or a thread, got {}",
            other.type_name()
        ))),
    }
}

/// The prelude: the `task` library's Luau half, `error`, and the raised-value table.
static PRELUDE: Embedded = Embedded::new("=skein prelude", include_str!("prelude.luau"));

fn install_task_library(lua: &Lua) -> mlua::Result<()> {
    let p = lua.create_table()?;
    p.raw_set(
        "parkTimer",
        lua.create_function(|lua, seconds: Option<f64>| {
            let core = VmCore::of(lua)?;
            let id = core.task_for(&lua.current_thread());
            let now = Instant::now();
            core.sched
                .borrow_mut()
                .park_timer(id, now, now + wait_duration(seconds));
            Ok(())
        })?,
    )?;
    p.raw_set(
        "parkFrames",
        lua.create_function(|lua, n: Value| {
            let frames = read_frame_count(&n)?;
            let clock = lua
                .app_data_ref::<FrameClock>()
                .map(|c| c.0.clone())
                .ok_or_else(|| {
                    mlua::Error::runtime("task.waitFrames: this VM has no frame clock")
                })?;
            let core = VmCore::of(lua)?;
            let id = core.task_for(&lua.current_thread());
            let now = clock.load(std::sync::atomic::Ordering::Acquire);
            core.sched
                .borrow_mut()
                .park_frames(id, now, now.saturating_add(frames));
            Ok(())
        })?,
    )?;
    p.raw_set(
        "pending",
        lua.create_function(|_, promise: Value| {
            Ok(luau_promise::promise_of(&promise).is_some_and(|p| p.outcome().is_none()))
        })?,
    )?;
    p.raw_set(
        "await",
        lua.create_function(|lua, value: Value| {
            let Some(cell) = luau_promise::promise_of(&value) else {
                return Err(mlua::Error::runtime(format!(
                    "task.await expects a PromiseHandle, got {}",
                    value.type_name()
                )));
            };
            let core = VmCore::of(lua)?;
            if POOL_PROMISES.contains(&cell.what) {
                // Refused whether or not it has settled: a warm must not depend on the pool's
                // timing, so the same code fails the same way every time.
                if let Some(warm) = core.current_owner().identity.warm() {
                    return Err(mlua::Error::runtime(format!(
                        "jobs.warm {warm}: awaiting a {} promise inside a warm would wait on \
                         the pool it is warming",
                        cell.what
                    )));
                }
            }
            if let Some(outcome) = cell.outcome() {
                return Ok(outcome_pair(lua, &core, &outcome));
            }
            if let Some(key) = cell.key() {
                if core.current_owner().identity.key() == Some(&key[..]) {
                    return Err(mlua::Error::runtime(format!(
                        "task.await: this item runs as key '{}' and awaits an item of the same \
                         key, which starts only after this one settles: it would wait forever",
                        String::from_utf8_lossy(&key)
                    )));
                }
            }
            let pool = POOL_PROMISES.contains(&cell.what);
            if pool {
                if let Err(refused) = refuse_past_pool_wait_limit(&core) {
                    // The work refused a waiter would nest further with no one to wait on it.
                    cancel_promise(lua, &cell)?;
                    return Err(refused);
                }
            }
            let id = core.task_for(&lua.current_thread());
            cell.add_waiter(id);
            core.sched.borrow_mut().park_promise(id, pool);
            // `nil`: pending, so `task.await` yields until the settlement resumes it.
            Ok((Value::Nil, AwaitedValue::Value(Value::Nil)))
        })?,
    )?;
    p.raw_set(
        "spawn",
        lua.create_function(|lua, (target, args): (Value, Variadic<Value>)| {
            let core = VmCore::of(lua)?;
            let thread = as_thread(lua, target, "task.spawn")
                .map_err(|e| core.named_error(e, "a task for task.spawn"))?;
            let owner = core.current_owner();
            let id = core.sched.borrow_mut().add(thread.clone(), owner, false);
            let hits = core.memory.hits();
            scheduler::resume_task(&*core, lua, id, Resume::Args(MultiValue::from_iter(args)));
            if core.memory.hits() != hits {
                // The VM ran out of memory in the spawned task's first run: that is the
                // spawner's condition too (a spawn bomb fills the VM through its tasks), so it
                // raises here, where a pcall around the spawning loop catches it.
                return Err(mlua::Error::runtime(format!(
                    "{} in the first run of a task it started",
                    core.memory.hit(None)
                )));
            }
            Ok(thread)
        })?,
    )?;
    p.raw_set(
        "defer",
        lua.create_function(|lua, (target, args): (Value, Variadic<Value>)| {
            let core = VmCore::of(lua)?;
            let thread = as_thread(lua, target, "task.defer")
                .map_err(|e| core.named_error(e, "a task for task.defer"))?;
            let owner = core.current_owner();
            let mut sched = core.sched.borrow_mut();
            let id = sched.add(thread.clone(), owner, false);
            sched.defer_with(id, MultiValue::from_iter(args));
            Ok(thread)
        })?,
    )?;
    p.raw_set(
        "delay",
        lua.create_function(
            |lua, (seconds, target, args): (Option<f64>, Value, Variadic<Value>)| {
                let core = VmCore::of(lua)?;
                let thread = as_thread(lua, target, "task.delay")
                    .map_err(|e| core.named_error(e, "a task for task.delay"))?;
                let owner = core.current_owner();
                let now = Instant::now();
                let mut sched = core.sched.borrow_mut();
                let id = sched.add(thread.clone(), owner, false);
                sched.delay_with(
                    id,
                    now + wait_duration(seconds),
                    MultiValue::from_iter(args),
                );
                Ok(thread)
            },
        )?,
    )?;
    p.raw_set(
        "cancel",
        lua.create_function(|lua, thread: Thread| {
            let core = VmCore::of(lua)?;
            if thread.to_pointer() == lua.current_thread().to_pointer() {
                return Err(mlua::Error::runtime(
                    "task.cancel can't cancel the running task",
                ));
            }
            core.sched.borrow_mut().remove_thread(&thread);
            Ok(())
        })?,
    )?;
    let (task, error, raised): (Table, Function, Table) = PRELUDE.load(lua)?.call(p)?;
    lua.globals().raw_set("error", error)?;
    lua.set_named_registry_value(RAISED_KEY, raised)?;
    let await_fn: Function = task.raw_get("await")?;
    luau_promise::install_methods(lua, await_fn)?;
    lua.globals().raw_set("task", task)?;
    Ok(())
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
        // The watch is over: a later start completes through its owner as before.
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
            let handle = luau_promise::handle(&vm.lua, cell.clone()).unwrap();
            let args = MultiValue::from_iter([Value::UserData(handle)]);
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
            raised.lines().next().unwrap(),
            "runtime error: task.await: nested waits past the limit: 2 tasks of the VM already wait on pool \
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
