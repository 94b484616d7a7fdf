//! The Luau `jobs` library: `jobs.dispatch`, `jobs.context`, `jobs.release` and
//! `jobs.onRelease`; `jobs.parallelFor`, `jobs.map` and `jobs.warm` are installed here and live
//! in `parallel_for.rs`, `map.rs` and `warm_api.rs`. The VM's home (who it runs as, where replies go) is
//! `home.rs`.

use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use mlua::{Function, Lua, MultiValue, Table, UserData, Value};

use super::dispatch_raw::dispatch_function;
use super::engine_events::install as install_engine_events;
use super::home::{charge_or_reclaim, home, refuse, registering_authority, HomeKind, JobsHome};
use super::issue::{queue, Dispatch};
use super::map::map;
use super::parallel_for::parallel_for;
use super::registered::lua::install as install_registered;
use super::warm_api::warm;
use crate::jobs::leaves::options::{module_refused, read_key, read_target, DispatchOptions};
use crate::jobs::protocol::messages::{ActorWake, DomainEvent, WorkerMsg};
use crate::principal::capability::Authority;
use crate::shared::{self, Courier};
use crate::value::{ExactValue, Message};
use crate::vm::{
    a_type, error_message, mode_of, promise_handle, watch_liveness, with_caller_source, Builtin,
    FrameClock, Owner, OwnerIdentity, Vm, VmCore,
};

/// Installs the `jobs` global (also `require("@skein/jobs")`).
pub(crate) fn install(lua: &Lua, home: JobsHome) -> mlua::Result<()> {
    let core = VmCore::of(lua)?;
    core.name_vm(lua, home.kind.vm_name())?;
    if let HomeKind::Worker { .. } = home.kind {
        core.limit_pool_waits(home.principal.plan.nested_wait_limit_tasks());
        // A worker runs `jobs.warm` entries, whose awaits of pool work are refused even when
        // settled: every await there goes through Rust.
        if let Some(handles) = core.handles.get() {
            handles.keep_reads_in_rust(lua)?;
        }
    }
    let home = Rc::new(home);
    lua.set_app_data(home.clone());
    let jobs = lua.create_table()?;
    // `dispatch` holds its home: looking it up in the app data on every call cost a borrow and
    // a type-map lookup per dispatch.
    let dispatch_home = home.clone();
    let slow = lua.create_function(move |lua, args| dispatch(lua, &dispatch_home, args))?;
    jobs.raw_set(
        "dispatch",
        dispatch_function(lua, home.clone(), core.clone(), slow)?,
    )?;
    jobs.raw_set("context", lua.create_function(context)?)?;
    jobs.raw_set("parallelFor", lua.create_function(parallel_for)?)?;
    jobs.raw_set("map", lua.create_function(map)?)?;
    jobs.raw_set("release", lua.create_function(release)?)?;
    jobs.raw_set("onRelease", lua.create_function(on_release)?)?;
    jobs.raw_set("stats", lua.create_function(stats)?)?;
    shared::install(lua, &jobs, home.principal.shared.clone())?;
    jobs.raw_set("warm", lua.create_function(warm)?)?;
    install_registered(lua, &jobs)?;
    lua.set_app_data(queue_courier(&home));
    lua.set_app_data(FrameClock(home.principal.frames.clone()));
    if let Some(live) = &home.principal.liveness {
        watch_liveness(lua, live.clone())?;
    }
    lua.set_named_registry_value(RELEASE_WATCHERS_KEY, lua.create_table()?)?;
    lua.set_named_registry_value(JOBS_KEY, jobs.clone())?;
    lua.globals().raw_set("jobs", jobs)?;
    let engine = lua.create_table()?;
    install_engine_events(lua, &engine, &home.principal.events)?;
    lua.globals().raw_set("engine", engine)?;
    Ok(())
}

/// How this VM's parked shared-queue pops receive their deliveries: through the home's inbox,
/// as replies do (`reply()`), so a delivery is handled on the VM's own thread.
fn queue_courier(home: &JobsHome) -> Courier {
    match &home.kind {
        HomeKind::Engine => {
            let mailbox = home.principal.mailbox.clone();
            Arc::new(move |parcel| {
                // A domain that is gone drops the parcel, which gives its value back.
                let _ = mailbox.send(DomainEvent::Parcel(parcel));
            })
        }
        HomeKind::Worker { index, .. } => {
            let (pool, worker, principal) = (home.pool.clone(), *index, home.principal.id);
            Arc::new(move |parcel| {
                pool.exec
                    .post(worker, WorkerMsg::Parcel { principal, parcel });
            })
        }
        HomeKind::Actor { wakes } => {
            let wakes = wakes.clone();
            Arc::new(move |parcel| {
                // A worker that has ended drops the parcel, which gives its value back.
                let _ = wakes.send(ActorWake::Parcel(parcel));
            })
        }
    }
}

/// `jobs.stats()`: the pool's per-worker rows, as `Pool::stats()` gives them to Rust. Times are
/// in milliseconds.
fn stats(lua: &Lua, (): ()) -> mlua::Result<Table> {
    let home = home(lua)?;
    let domain = home.principal.id.domain;
    let rows = home
        .pool
        .stats_listing(|(principal, _)| principal.domain == domain);
    let out = lua.create_table_with_capacity(rows.len(), 0)?;
    // The domain's VMs share one plan, so the caller's mode is the workers' mode too.
    let native = mode_of(lua).in_use();
    for row in rows {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let t = lua.create_table_with_capacity(0, 16)?;
        t.raw_set("worker", row.worker as f64)?;
        t.raw_set("items_run", row.items_run as f64)?;
        t.raw_set("steals", row.steals as f64)?;
        t.raw_set("sleeps", row.sleeps as f64)?;
        t.raw_set("panics", row.panics as f64)?;
        t.raw_set("vms_held", row.vms_held as f64)?;
        t.raw_set("busy_ms", ms(row.busy))?;
        t.raw_set("keys_held", row.keys_held as f64)?;
        t.raw_set("keyed_items", row.keyed_items as f64)?;
        t.raw_set("key_wait_total_ms", ms(row.key_wait_total))?;
        t.raw_set("key_wait_max_ms", ms(row.key_wait_max))?;
        let keys = lua.create_table_with_capacity(row.keys.len(), 0)?;
        for held in &row.keys {
            let k = lua.create_table_with_capacity(0, 4)?;
            k.raw_set("key", held.key.as_str())?;
            k.raw_set("items", held.items as f64)?;
            k.raw_set("wait_total_ms", ms(held.wait_total))?;
            k.raw_set("wait_max_ms", ms(held.wait_max))?;
            keys.raw_push(k)?;
        }
        t.raw_set("keys", keys)?;
        let warm = lua.create_table_with_capacity(row.warm_runs.len(), 0)?;
        for run in &row.warm_runs {
            let r = lua.create_table_with_capacity(0, 4)?;
            r.raw_set("name", run.name.as_str())?;
            r.raw_set("ms", ms(run.elapsed))?;
            r.raw_set("ok", run.ok())?;
            r.raw_set("error", run.error.as_deref())?;
            warm.raw_push(r)?;
        }
        t.raw_set("warm", warm)?;
        t.raw_set("native", native.as_str())?;
        t.raw_set("native_modules", row.native_modules as f64)?;
        t.raw_set("native_bytecode_bytes", row.native_bytecode_bytes as f64)?;
        t.raw_set("native_code_bytes", row.native_code_bytes as f64)?;
        out.raw_push(t)?;
    }
    Ok(out)
}

/// Registry key of the `jobs` table, which `require("@skein/jobs")` answers.
pub(crate) const JOBS_KEY: &str = "skein.jobs";

/// The built-in modules of the jobs layer, for a domain's plan: `@skein/jobs`.
pub(crate) const BUILTINS: &[Builtin] = &[Builtin {
    name: "@skein/jobs",
    build: jobs_module,
}];

/// The VM's `jobs` table: the sandbox hides the real globals behind a per-thread proxy, so
/// [`install`] keeps it in the registry.
fn jobs_module(lua: &Lua) -> mlua::Result<Value> {
    lua.named_registry_value::<Value>(JOBS_KEY)
}

/// Registry key of this VM's `jobs.onRelease` watchers: a table of watcher -> the authority of
/// the task that registered it (a [`RegisteredAs`]), or `true` when none was installed.
const RELEASE_WATCHERS_KEY: &str = "skein.jobs.onRelease";

/// The authority a callback was registered under, kept beside it in a Luau table: each run of
/// the callback holds it, so the callback never holds more than the code that registered it.
struct RegisteredAs(Arc<Authority>);

impl UserData for RegisteredAs {}

/// The value a watcher table keeps for a callback registered now: the running task's authority.
fn registered_as(lua: &Lua) -> mlua::Result<Value> {
    match registering_authority(lua) {
        Some(authority) => lua
            .create_userdata(RegisteredAs(authority))
            .map(Value::UserData),
        None => Ok(Value::Boolean(true)),
    }
}

/// The authority a watcher table kept with a callback (`None`: the VM's own).
fn authority_of(value: &Value) -> Option<Arc<Authority>> {
    match value {
        Value::UserData(ud) => ud.borrow::<RegisteredAs>().ok().map(|a| a.0.clone()),
        _ => None,
    }
}

fn context(lua: &Lua, (): ()) -> mlua::Result<Value> {
    let home = home(lua)?;
    match &home.kind {
        HomeKind::Engine | HomeKind::Actor { .. } => Ok(Value::Nil),
        HomeKind::Worker { index, .. } => {
            // The running task's owner is the item (or nothing keyed, in a watcher).
            let owner = VmCore::of(lua)?.current_owner();
            let t: Table = lua.create_table()?;
            t.raw_set("worker", *index as i64)?;
            match owner.identity.key() {
                Some(key) => t.raw_set("key", lua.create_string(key)?)?,
                None => t.raw_set("key", Value::Nil)?,
            }
            t.raw_set("fresh", owner.identity.fresh())?;
            Ok(Value::Table(t))
        }
    }
}

/// `jobs.release(key) -> boolean`.
fn release(lua: &Lua, key: Value) -> mlua::Result<bool> {
    let home = home(lua)?;
    let key = read_key(&key, "jobs.release: key").map_err(refuse)?;
    Ok(home.pool.release_key((home.principal.id, key)))
}

/// `jobs.onRelease(watcher) -> remover`.
fn on_release(lua: &Lua, watcher: Value) -> mlua::Result<Function> {
    let Value::Function(watcher) = watcher else {
        return Err(refuse(format!(
            "jobs.onRelease: watcher must be a function, got {}",
            a_type(&watcher)
        )));
    };
    let watchers: Table = lua.named_registry_value(RELEASE_WATCHERS_KEY)?;
    watchers.raw_set(watcher.clone(), registered_as(lua)?)?;
    lua.create_function(move |lua, ()| {
        let watchers: Table = lua.named_registry_value(RELEASE_WATCHERS_KEY)?;
        watchers.raw_set(watcher.clone(), Value::Nil)
    })
}

/// Runs this VM's `jobs.onRelease` watchers with a released key, each as a task of its own
/// under the authority of the task that registered it.
pub(crate) fn run_release_watchers(vm: &Vm, key: &[u8], deadline: Duration) {
    let run = || -> mlua::Result<()> {
        let watchers: Table = vm.lua.named_registry_value(RELEASE_WATCHERS_KEY)?;
        let mut list = Vec::new();
        for pair in watchers.pairs::<Function, Value>() {
            let (watcher, registered) = pair?;
            list.push((watcher, authority_of(&registered)));
        }
        let key = vm.lua.create_string(key)?;
        for (watcher, authority) in list {
            let identity: Arc<dyn OwnerIdentity> = Arc::new(WATCHER_LABEL);
            let mut owner = Owner::new(identity, deadline, None);
            if let Some(authority) = authority {
                owner = owner.with_authority(authority);
            }
            let owner = Rc::new(owner);
            vm.start(
                watcher,
                MultiValue::from_iter([Value::String(key.clone())]),
                owner,
            )?;
        }
        Ok(())
    };
    if let Err(e) = run() {
        vm.core.report_failure(WATCHER_LABEL, &error_message(&e));
    }
}

/// How reports name a release watcher's task.
const WATCHER_LABEL: &str = "jobs.onRelease watcher";

fn dispatch(
    lua: &Lua,
    home: &JobsHome,
    (module, entry, ExactValue(args), opts): (Value, Value, ExactValue, Value),
) -> mlua::Result<Value> {
    let core = VmCore::of(lua)?;
    let (module, entry) = read_target("jobs.dispatch", module, entry).map_err(refuse)?;
    let opts = DispatchOptions::read(&opts, home.principal.max_deadline).map_err(refuse)?;
    // Both names are read in place and interned: a dispatch to a known module and entry
    // allocates nothing for them.
    let module = with_caller_source(lua, |source| match module.to_str() {
        Ok(spec) => core.modules.resolve(source, &spec),
        Err(_) => core.modules.resolve(source, &module.to_string_lossy()),
    })
    .map_err(|e| refuse(module_refused("jobs.dispatch", "module", &e)))?;
    let entry = home.intern_entry_string(&entry);
    let (args, weight) =
        Message::read_weighed(&args, "args").map_err(|e| refuse(format!("jobs.dispatch: {e}")))?;
    let budget = &home.principal.job_bytes;
    let call = Dispatch::new(opts, home.target(module, entry), args, weight);
    let cell = queue(home, &core, call, |n| {
        charge_or_reclaim(lua, &core, budget, n, "jobs.dispatch")
    })
    .map_err(refuse)?;
    promise_handle(lua, cell)
}
