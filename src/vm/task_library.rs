//! The `task` library: the native primitives each `task` function parks or starts a task
//! through, and the prelude (`prelude.luau`) that builds the Luau-facing library around them.
//!
//! Every primitive finds its VM's scheduler through [`VmCore::of`]; none holds state of its own.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mlua::{Function, Lua, MultiValue, Table, Thread, Value, Variadic};

use super::a_type;
use super::caught_error;
use super::core::{cancel_promise, VmCore};
use super::embedded::Embedded;
use super::luau_promise::Outcome;
use super::out_of_memory;
use super::promise_handle;
use super::raised::RAISED_KEY;
use super::scheduler::{self, Resume, MAX_WAIT};
use super::signal_waits::{SignalKind, MAX_SIGNAL_WAITERS};

/// The kinds of promise the pool settles (their `what`): a warm entry may not await them.
pub(crate) const POOL_PROMISES: [&str; 4] =
    ["jobs.dispatch", "jobs.parallelFor", "jobs.map", "jobs.warm"];

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
pub(crate) struct FrameClock(pub(crate) Arc<AtomicU64>);

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
        other => Err(refuse(a_type(other))),
    }
}

/// A function or a thread, as `task.spawn` and friends take them.
fn as_thread(lua: &Lua, target: Value, what: &str) -> mlua::Result<Thread> {
    match target {
        Value::Function(f) => lua.create_thread(f),
        Value::Thread(t) => Ok(t),
        other => Err(mlua::Error::runtime(format!(
            "{what}: f must be a function or a thread, got {}",
            a_type(&other)
        ))),
    }
}

/// Reads a number of seconds `what` takes as its `param` (`task.wait`'s `seconds`): nil, a
/// number, or a string Luau reads as one.
fn read_seconds(lua: &Lua, value: Value, what: &str, param: &str) -> mlua::Result<Option<f64>> {
    match value {
        Value::Nil => Ok(None),
        Value::Integer(i) => Ok(Some(i as f64)),
        Value::Number(x) => Ok(Some(x)),
        Value::String(_) => match lua.coerce_number(value.clone())? {
            Some(x) => Ok(Some(x)),
            None => Err(seconds_refused(what, param, &value)),
        },
        other => Err(seconds_refused(what, param, &other)),
    }
}

fn seconds_refused(what: &str, param: &str, got: &Value) -> mlua::Error {
    mlua::Error::runtime(format!(
        "{what}: {param} must be a number of seconds or nil, got {}",
        a_type(got)
    ))
}

/// The prelude: the `task` library's Luau half, `error`, and the raised-value table.
static PRELUDE: Embedded = Embedded::new("=skein prelude", include_str!("prelude.luau"));

/// Installs `task`, `error` and the promise methods: the native primitives below go to the
/// prelude, which builds the Luau-facing library around them.
pub(super) fn install(lua: &Lua) -> mlua::Result<()> {
    let core = VmCore::of(lua)?;
    let p = lua.create_table()?;
    p.raw_set("parkTimer", lua.create_function(park_timer)?)?;
    p.raw_set("parkFrames", lua.create_function(park_frames)?)?;
    p.raw_set("pending", lua.create_function(pending)?)?;
    let slow_await = lua.create_function(await_promise)?;
    p.raw_set(
        "await",
        promise_handle::raw_await_function(lua, &core, slow_await)?,
    )?;
    let tables = promise_handle::prelude_tables(lua)?;
    p.raw_set("handles", tables.slots.clone())?;
    p.raw_set("reads", tables.reads.clone())?;
    p.raw_set("spawn", lua.create_function(spawn)?)?;
    p.raw_set("defer", lua.create_function(defer)?)?;
    p.raw_set("delay", lua.create_function(delay)?)?;
    p.raw_set("cancel", lua.create_function(cancel)?)?;
    p.raw_set(
        "caughtOutOfMemory",
        out_of_memory::caught_function(lua, &core.memory)?,
    )?;
    p.raw_set("errorText", caught_error::text_function(lua)?)?;
    let (task, error, raised, make_wait, xpcall): (Table, Function, Table, Function, Function) =
        PRELUDE.load(lua)?.call(p)?;
    lua.set_named_registry_value(MAKE_WAIT_KEY, make_wait)?;
    lua.globals().raw_set("error", error)?;
    out_of_memory::install_pcall(lua, &core.memory)?;
    lua.globals().raw_set("xpcall", xpcall)?;
    lua.set_named_registry_value(RAISED_KEY, raised)?;
    let await_fn: Function = task.raw_get("await")?;
    promise_handle::install(lua, &core, tables, await_fn)?;
    lua.globals().raw_set("task", task)?;
    Ok(())
}

/// `task.wait`'s park: the running task sleeps for `seconds` on the VM's clock (frame time in
/// a domain driven by frames, else the wall clock).
fn park_timer(lua: &Lua, seconds: Value) -> mlua::Result<()> {
    let seconds = read_seconds(lua, seconds, "task.wait", "seconds")?;
    let core = VmCore::of(lua)?;
    let id = core.task_for(&lua.current_thread());
    let now = core.sched.borrow().now();
    core.sched
        .borrow_mut()
        .park_timer(id, now, now + wait_duration(seconds));
    Ok(())
}

/// `task.waitFrames`'s park: the running task sleeps for `n` frames of the domain's clock.
fn park_frames(lua: &Lua, n: Value) -> mlua::Result<()> {
    let frames = read_frame_count(&n)?;
    let clock = lua
        .app_data_ref::<FrameClock>()
        .map(|c| c.0.clone())
        .ok_or_else(|| mlua::Error::runtime("task.waitFrames: this VM has no frame clock"))?;
    let core = VmCore::of(lua)?;
    let id = core.task_for(&lua.current_thread());
    let now = clock.load(Ordering::Acquire);
    core.sched
        .borrow_mut()
        .park_frames(id, now, now.saturating_add(frames));
    Ok(())
}

/// Whether `promise` is a promise that has not settled.
fn pending(lua: &Lua, promise: Value) -> mlua::Result<bool> {
    Ok(promise_handle::promise_of(lua, &promise).is_some_and(|p| p.is_pending()))
}

/// `(resolved, value)` of a settled promise as `task.await` receives them: `true` and the value
/// (written into its handle when it settled), or `false` and the error text, made now. A VM out
/// of memory can't make the text: the await raises the out-of-memory text the VM made while it
/// had memory.
fn settled_pair(
    lua: &Lua,
    core: &VmCore,
    handle: &Value,
    outcome: &Outcome,
    unbuilt: Option<String>,
) -> mlua::Result<(Value, Value)> {
    let text = match (outcome, unbuilt) {
        (_, Some(why)) => why,
        (Outcome::Resolved(_), None) => {
            let Value::Table(handle) = handle else {
                return Ok((Value::Boolean(true), Value::Nil));
            };
            return Ok((Value::Boolean(true), handle.raw_get(3)?));
        }
        (Outcome::Rejected(failure), None) => {
            let text = failure.headline();
            // The rest of the full text: the stack, and any the message held (a load's).
            let full = failure.to_string();
            let stack = full.get(text.len()..).unwrap_or_default();
            core.remember_rejection(&text, stack.trim_start_matches('\n'));
            text
        }
        (Outcome::Cancelled, None) => "cancelled".to_owned(),
    };
    let text = match lua.create_string(&text) {
        Ok(text) => text,
        Err(_) => core.memory.outcome_text(),
    };
    Ok((Value::Boolean(false), Value::String(text)))
}

/// `task.await`'s native half, the slow path behind the raw `P.await`
/// (`promise_handle::raw_await`), which hands over whatever is not its common case: the settled
/// outcome at once, or `nil` after parking the running task on the promise (the prelude then
/// yields until the settlement resumes it). Refuses the waits that could never end: pool work
/// inside a warm, an item of the caller's own key, and pool work past the VM's nested-wait
/// limit.
fn await_promise(lua: &Lua, value: Value) -> mlua::Result<(Value, Value)> {
    let Some(cell) = promise_handle::promise_of(lua, &value) else {
        return Err(mlua::Error::runtime(format!(
            "task.await: promise must be a PromiseHandle (p:await() is task.await(p)), got {}",
            a_type(&value)
        )));
    };
    let core = VmCore::of(lua)?;
    let what = cell.what;
    let pool = POOL_PROMISES.contains(&what);
    if pool {
        // Refused whether or not it has settled: a warm must not depend on the pool's
        // timing, so the same code fails the same way every time.
        if let Some(warm) = core.current_owner().identity.warm() {
            return Err(mlua::Error::runtime(format!(
                "jobs.warm {warm}: awaiting a {what} promise inside a warm would wait on the pool \
                 it is warming"
            )));
        }
    }
    if let Some(outcome) = cell.outcome() {
        return settled_pair(lua, &core, &value, &outcome, cell.unbuilt());
    }
    if let Some(key) = cell.key() {
        if core.current_owner().identity.key() == Some(&key[..]) {
            return Err(mlua::Error::runtime(format!(
                "task.await: this item runs as key '{}' and awaits an item of the same key, \
                 which starts only after this one settles: it would wait forever",
                String::from_utf8_lossy(&key)
            )));
        }
    }
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
    Ok((Value::Nil, Value::Nil))
}

/// `task.spawn`: runs `target` now, until it first yields.
fn spawn(lua: &Lua, (target, args): (Value, Variadic<Value>)) -> mlua::Result<Thread> {
    let core = VmCore::of(lua)?;
    let thread = as_thread(lua, target, "task.spawn")
        .map_err(|e| core.named_error(e, "a task for task.spawn"))?;
    let owner = core.current_owner();
    let id = core.sched.borrow_mut().add(thread.clone(), owner, false);
    let hits = core.memory.hits();
    scheduler::resume_task(&*core, lua, id, Resume::Args(MultiValue::from_iter(args)));
    if core.memory.hits() != hits {
        // The VM ran out of memory in the spawned task's first run: that is the spawner's
        // condition too (a spawn bomb fills the VM through its tasks), so it raises here, where
        // a pcall around the spawning loop catches it.
        return Err(mlua::Error::runtime(format!(
            "{} in the first run of a task it started",
            core.memory.hit(None)
        )));
    }
    Ok(thread)
}

/// `task.defer`: runs `target` at the end of this resumption cycle.
fn defer(lua: &Lua, (target, args): (Value, Variadic<Value>)) -> mlua::Result<Thread> {
    let core = VmCore::of(lua)?;
    let thread = as_thread(lua, target, "task.defer")
        .map_err(|e| core.named_error(e, "a task for task.defer"))?;
    let owner = core.current_owner();
    let mut sched = core.sched.borrow_mut();
    let id = sched.add(thread.clone(), owner, false);
    sched.defer_with(id, MultiValue::from_iter(args));
    Ok(thread)
}

/// `task.delay`: runs `target` after `seconds`.
fn delay(
    lua: &Lua,
    (seconds, target, args): (Value, Value, Variadic<Value>),
) -> mlua::Result<Thread> {
    let seconds = read_seconds(lua, seconds, "task.delay", "seconds")?;
    let core = VmCore::of(lua)?;
    let thread = as_thread(lua, target, "task.delay")
        .map_err(|e| core.named_error(e, "a task for task.delay"))?;
    let owner = core.current_owner();
    let mut sched = core.sched.borrow_mut();
    let now = sched.now();
    let id = sched.add(thread.clone(), owner, false);
    sched.delay_with(
        id,
        now + wait_duration(seconds),
        MultiValue::from_iter(args),
    );
    Ok(thread)
}

/// Where the prelude's `makeWait` is kept: it wraps a native park into a Luau function that
/// parks the calling task and yields (a Rust callback cannot yield).
const MAKE_WAIT_KEY: &str = "skein.makeWait";

/// The longest name a signal wait takes, in bytes: an event name's bound.
const MAX_SIGNAL_NAME: usize = 256;

/// A Luau function named `what` (`events.wait`) that calls `park(name, timeout)`, then yields
/// until the scheduler resumes the task with what it waited for.
pub(crate) fn wait_function(lua: &Lua, what: &str, park: Function) -> mlua::Result<Function> {
    let make: Function = lua.named_registry_value(MAKE_WAIT_KEY)?;
    make.call((what, park))
}

/// Parks the running task on the signal `name` of `kind` (`events.wait`, `engine.wait`): it
/// resumes with the payload of the next event of that name the VM delivers (an engine event
/// numbered `since` or later), or with `nil, "timeout"` once `timeout` seconds of the VM's
/// clock have passed. Refuses a bad name or timeout, and a wait past
/// [`MAX_SIGNAL_WAITERS`].
pub(crate) fn park_signal(
    lua: &Lua,
    kind: SignalKind,
    name: &Value,
    timeout: &Value,
    since: u64,
) -> mlua::Result<()> {
    let what = kind.call();
    let name = match name {
        Value::String(s) => match s.to_str() {
            Ok(text) => text.to_owned(),
            Err(_) => {
                return Err(mlua::Error::runtime(format!(
                    "{what}: name must be UTF-8 text"
                )))
            }
        },
        other => {
            return Err(mlua::Error::runtime(format!(
                "{what}: name must be a string, got {}",
                a_type(other)
            )))
        }
    };
    if name.is_empty() || name.len() > MAX_SIGNAL_NAME {
        return Err(mlua::Error::runtime(format!(
            "{what}: an event name must be 1 to {MAX_SIGNAL_NAME} bytes, got {}",
            name.len()
        )));
    }
    let timeout = match timeout {
        Value::Nil => None,
        Value::Integer(i) => Some(wait_duration(Some(*i as f64))),
        Value::Number(x) => Some(wait_duration(Some(*x))),
        other => {
            return Err(mlua::Error::runtime(format!(
                "{what}: timeout must be a number of seconds or nil, got {}",
                a_type(other)
            )))
        }
    };
    let core = VmCore::of(lua)?;
    let id = core.task_for(&lua.current_thread());
    let parked = core
        .sched
        .borrow_mut()
        .park_signal(id, kind, &name, since, timeout);
    parked.map_err(|waiting| {
        mlua::Error::runtime(format!(
            "{what}: {waiting} tasks of this VM already wait on events, the most that may \
             ({MAX_SIGNAL_WAITERS}); this wait was refused"
        ))
    })
}

/// `task.cancel`: forgets a task that is not running.
fn cancel(lua: &Lua, thread: Value) -> mlua::Result<()> {
    let Value::Thread(thread) = thread else {
        return Err(mlua::Error::runtime(format!(
            "task.cancel: thread must be a coroutine (a thread), got {}",
            a_type(&thread)
        )));
    };
    let core = VmCore::of(lua)?;
    if thread.to_pointer() == lua.current_thread().to_pointer() {
        return Err(mlua::Error::runtime(
            "task.cancel can't cancel the running task",
        ));
    }
    core.sched.borrow_mut().remove_thread(&thread);
    Ok(())
}
