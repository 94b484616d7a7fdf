//! The Luau `jobs` library: `jobs.dispatch`, `jobs.context`, `jobs.release` and
//! `jobs.onRelease`; `jobs.parallelFor` and `jobs.warm` are installed here and live in
//! `parallel_for` and `warm`.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use std::time::{Duration, Instant};

use mlua::{Function, Lua, MultiValue, Table, UserData, Value};
use rustc_hash::{FxHashMap, FxHashSet};

use super::item::{charge_job, Item, ItemArgs, JobShared, ReplyTo, JOB_WEIGHT};
use super::options::{read_key, DispatchOptions};
use super::pool::PoolShared;
use super::principal_cell::PrincipalCell;
use crate::principal::capability::{current_arc, Authority};
use crate::value::{ExactValue, Held, Message};
use crate::vm::{
    promise_handle, watch_liveness, with_caller_source, Builtin, Owner, PromiseId, Vm, VmCore,
};

/// Where the VM that calls `jobs.*` lives.
pub(crate) enum HomeKind {
    /// A domain's engine thread.
    Engine,
    /// A pool worker; items it dispatches go to its own deque through `outbox`.
    Worker {
        index: usize,
        /// This VM's serial: replies carry it, so a reply meant for a VM the worker has since
        /// replaced (after a panic) can't settle a promise of the new one that reuses its id.
        vm: u64,
        outbox: Rc<RefCell<Vec<Item>>>,
    },
    /// A `@skein/worker` worker's VM, on the worker's own thread: its items go to the pool's
    /// injector, and replies and shared-queue deliveries come back through `wakes`.
    Actor {
        wakes: crossbeam_channel::Sender<super::item::ActorWake>,
    },
}

impl HomeKind {
    /// How out-of-memory texts name the VM: "the engine VM", "the VM of worker 2".
    fn vm_name(&self) -> String {
        match self {
            HomeKind::Engine => "the engine VM".to_owned(),
            HomeKind::Worker { index, .. } => format!("the VM of worker {index}"),
            HomeKind::Actor { .. } => "the VM of a @skein/worker".to_owned(),
        }
    }
}

/// What the `jobs` bindings of one VM need: who they run as and how they reach the pool.
pub(crate) struct JobsHome {
    pub(crate) principal: Arc<PrincipalCell>,
    pub(crate) pool: Arc<PoolShared>,
    pub(crate) kind: HomeKind,
    /// Entry names this VM dispatched, shared by every item that names them.
    entries: RefCell<FxHashSet<Arc<str>>>,
    /// The same names by the address of the Luau string that named them, so a dispatch finds its
    /// entry without copying the string out of the VM (`to_str` clones a reference into the
    /// VM and allocates). The map holds each string, so no other string can take its address
    /// while it is a key.
    entry_strings: RefCell<FxHashMap<usize, (mlua::LuaString, Arc<str>)>>,
}

/// How many entry names a VM interns before it starts over.
const INTERNED_ENTRIES: usize = 1024;

impl JobsHome {
    pub(crate) fn new(
        principal: Arc<PrincipalCell>,
        pool: Arc<PoolShared>,
        kind: HomeKind,
    ) -> Self {
        JobsHome {
            principal,
            pool,
            kind,
            entries: RefCell::new(FxHashSet::default()),
            entry_strings: RefCell::new(FxHashMap::default()),
        }
    }

    /// Where a reply settling promise `promise` of this VM goes.
    pub(crate) fn reply_to(&self, promise: PromiseId) -> ReplyTo {
        match &self.kind {
            HomeKind::Engine => ReplyTo::Engine(promise),
            HomeKind::Worker { index, vm, .. } => ReplyTo::Worker {
                worker: *index,
                vm: *vm,
                promise,
            },
            HomeKind::Actor { wakes } => ReplyTo::Actor {
                wakes: wakes.clone(),
                promise,
            },
        }
    }

    /// [`JobsHome::intern_entry`] for a Luau string, found by its address once it was seen.
    fn intern_entry_string(&self, name: &mlua::LuaString) -> Arc<str> {
        let address = name.to_pointer() as usize;
        if let Some((_, known)) = self.entry_strings.borrow().get(&address) {
            return known.clone();
        }
        let interned = match name.to_str() {
            Ok(text) => self.intern_entry(&text),
            Err(_) => self.intern_entry(&name.to_string_lossy()),
        };
        let mut strings = self.entry_strings.borrow_mut();
        if strings.len() >= INTERNED_ENTRIES {
            strings.clear();
        }
        strings.insert(address, (name.clone(), interned.clone()));
        interned
    }

    pub(super) fn intern_entry(&self, name: &str) -> Arc<str> {
        let mut entries = self.entries.borrow_mut();
        if let Some(known) = entries.get(name) {
            return known.clone();
        }
        if entries.len() >= INTERNED_ENTRIES {
            entries.clear();
        }
        let name: Arc<str> = name.into();
        entries.insert(name.clone());
        name
    }
}

/// Installs the `jobs` global (also `require("@skein/jobs")`).
pub(crate) fn install(lua: &Lua, home: JobsHome) -> mlua::Result<()> {
    let core = VmCore::of(lua)?;
    core.name_vm(lua, home.kind.vm_name())?;
    if let HomeKind::Worker { .. } = home.kind {
        core.limit_pool_waits(home.principal.plan.nested_wait_limit_tasks());
    }
    let home = Rc::new(home);
    lua.set_app_data(home.clone());
    let jobs = lua.create_table()?;
    // `dispatch` holds its home: looking it up in the app data on every call cost a borrow and
    // a type-map lookup per dispatch.
    let dispatch_home = home.clone();
    jobs.raw_set(
        "dispatch",
        lua.create_function(move |lua, args| dispatch(lua, &dispatch_home, args))?,
    )?;
    jobs.raw_set("context", lua.create_function(context)?)?;
    jobs.raw_set(
        "parallelFor",
        lua.create_function(super::parallel_for::parallel_for)?,
    )?;
    jobs.raw_set("release", lua.create_function(release)?)?;
    jobs.raw_set("onRelease", lua.create_function(on_release)?)?;
    jobs.raw_set("stats", lua.create_function(stats)?)?;
    crate::shared::install(lua, &jobs, home.principal.shared.clone())?;
    jobs.raw_set("warm", lua.create_function(super::warm::warm)?)?;
    super::registered::install(lua, &jobs)?;
    lua.set_app_data(queue_courier(&home));
    lua.set_app_data(crate::vm::FrameClock(home.principal.frames.clone()));
    if let Some(live) = &home.principal.liveness {
        watch_liveness(lua, live.clone())?;
    }
    lua.set_named_registry_value(RELEASE_WATCHERS_KEY, lua.create_table()?)?;
    lua.set_named_registry_value(JOBS_KEY, jobs.clone())?;
    lua.globals().raw_set("jobs", jobs)?;
    let engine = lua.create_table()?;
    super::events::install(lua, &engine, &home.principal.events)?;
    lua.globals().raw_set("engine", engine)?;
    Ok(())
}

/// How this VM's parked shared-queue pops receive their deliveries: through the home's inbox,
/// as replies do (`reply()`), so a delivery is handled on the VM's own thread.
fn queue_courier(home: &JobsHome) -> crate::shared::Courier {
    match &home.kind {
        HomeKind::Engine => {
            let mailbox = home.principal.mailbox.clone();
            Arc::new(move |parcel| {
                // A domain that is gone drops the parcel, which gives its value back.
                let _ = mailbox.send(super::item::DomainEvent::Parcel(parcel));
            })
        }
        HomeKind::Worker { index, .. } => {
            let (pool, worker, principal) = (home.pool.clone(), *index, home.principal.id);
            Arc::new(move |parcel| {
                pool.exec
                    .post(worker, super::item::WorkerMsg::Parcel { principal, parcel });
            })
        }
        HomeKind::Actor { wakes } => {
            let wakes = wakes.clone();
            Arc::new(move |parcel| {
                // A worker that has ended drops the parcel, which gives its value back.
                let _ = wakes.send(super::item::ActorWake::Parcel(parcel));
            })
        }
    }
}

/// `jobs.stats()`: the pool's per-worker rows, as `Pool::stats()` gives them to Rust. Times are
/// in milliseconds.
fn stats(lua: &Lua, (): ()) -> mlua::Result<Table> {
    let home = home(lua)?;
    let rows = home.pool.stats();
    let out = lua.create_table_with_capacity(rows.len(), 0)?;
    for row in rows {
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1000.0;
        let t = lua.create_table_with_capacity(0, 12)?;
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

/// The principal of the VM's home, when the VM belongs to a domain.
pub(crate) fn home_principal(lua: &Lua) -> Option<Arc<PrincipalCell>> {
    lua.app_data_ref::<Rc<JobsHome>>()
        .map(|h| h.principal.clone())
}

/// The authority a callback registered now keeps for its calls: the running task's, or `None`
/// when that is the VM's own (the principal's), so a callback the domain's own code registers
/// runs exactly as before, with no reference count moved per call.
pub(crate) fn registering_authority(lua: &Lua) -> Option<Arc<Authority>> {
    let current = current_arc()?;
    match home_principal(lua) {
        Some(principal) if Arc::ptr_eq(&current, &principal.authority) => None,
        _ => Some(current),
    }
}

pub(super) fn home(lua: &Lua) -> mlua::Result<Rc<JobsHome>> {
    lua.app_data_ref::<Rc<JobsHome>>()
        .map(|h| h.clone())
        .ok_or_else(|| mlua::Error::runtime("jobs: this VM is not attached to a pool"))
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
            crate::vm::a_type(&watcher)
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
            let identity: Arc<dyn crate::vm::OwnerIdentity> = Arc::new(WATCHER_LABEL);
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
        vm.core
            .report_failure(WATCHER_LABEL, &crate::vm::error_message(&e));
    }
}

/// How reports name a release watcher's task.
const WATCHER_LABEL: &str = "jobs.onRelease watcher";

pub(super) fn refuse(message: String) -> mlua::Error {
    mlua::Error::runtime(message)
}

fn dispatch(
    lua: &Lua,
    home: &JobsHome,
    (module, entry, ExactValue(args), opts): (Value, Value, ExactValue, Value),
) -> mlua::Result<Value> {
    let core = VmCore::of(lua)?;
    let Value::String(module) = module else {
        return Err(refuse(format!(
            "jobs.dispatch: module must be a require path string, got {}",
            module.type_name()
        )));
    };
    let Value::String(entry) = entry else {
        return Err(refuse(format!(
            "jobs.dispatch: entry must be the name of a function, got {}",
            entry.type_name()
        )));
    };
    let opts = DispatchOptions::read(&opts, home.principal.max_deadline).map_err(refuse)?;
    // Both names are read in place and interned: a dispatch to a known module and entry
    // allocates nothing for them.
    let module = with_caller_source(lua, |source| match module.to_str() {
        Ok(spec) => core.modules.resolve(source, &spec),
        Err(_) => core.modules.resolve(source, &module.to_string_lossy()),
    })
    .map_err(|e| refuse(format!("jobs.dispatch: {e}")))?;
    let entry = home.intern_entry_string(&entry);
    let (args, weight) =
        Message::read_weighed(&args, "args").map_err(|e| refuse(format!("jobs.dispatch: {e}")))?;
    // The job's own weight lasts as long as its promise; its arguments' only while its item
    // waits and runs. Both are taken before anything is made, so a refusal leaves nothing.
    let budget = &home.principal.job_bytes;
    let held = charge_job(budget, JOB_WEIGHT, "jobs.dispatch").map_err(refuse)?;
    let carried = charge_job(budget, weight, "jobs.dispatch").map_err(refuse)?;

    let job = JobShared::new(
        opts.name,
        module.spec,
        entry.clone(),
        home.pool.clone(),
        home.principal.id,
        opts.key.clone(),
    );
    job.hold(Held::Own(held));
    let cell = core.promises.borrow_mut().make("jobs.dispatch");
    cell.set_canceller(job.clone());
    if let Some(key) = &opts.key {
        cell.set_key(key.clone());
    }
    let reply = home.reply_to(cell.id());
    let item = Item {
        principal: home.principal.clone(),
        authority: crate::principal::capability::current_or(&home.principal.authority),
        job,
        module: module.path,
        entry,
        args: ItemArgs::Plain(args),
        deadline: opts.deadline,
        reply,
        queued_at: (opts.key.is_some() || home.principal.profile.is_some()).then(Instant::now),
        charge: Some(Held::Own(carried)),
    };
    match (opts.key, &home.kind) {
        (Some(key), _) => {
            let lane = (home.principal.id, key);
            if let Err(refusal) =
                home.pool
                    .dispatch_keyed(lane, item, opts.supersede, "jobs.dispatch: opts.key")
            {
                // Nobody holds the promise yet: take it out of the pending table unsettled.
                core.promises
                    .borrow_mut()
                    .settle(cell.id(), crate::vm::Outcome::Cancelled);
                return Err(refuse(refusal));
            }
        }
        (None, HomeKind::Engine | HomeKind::Actor { .. }) => home.pool.inject(item),
        (None, HomeKind::Worker { outbox, .. }) => outbox.borrow_mut().push(item),
    }
    Ok(Value::UserData(promise_handle(lua, cell)?))
}
