//! The steps of starting one item on a worker, in order: [`claim`] it (a cancelled item is
//! already answered; an ended principal's is refused), [`prepare`] its VM (engine services,
//! engine events, the key's freshness, changed modules), [`find_entry`], build its arguments
//! ([`entry_args`]), and [`launch`] its root task. Any step that fails answers the item with
//! [`reject`]. `LuauWorker::start` (in `mod.rs`) runs them; the VM is found or built there.
//! The steps are `#[inline]`, and [`launch`] `#[inline(always)]`: an item passed through a call
//! that is not inlined costs a copy of it on every item.

use std::any::Any;
use std::ffi::c_int;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use mlua::{ffi, Lua, RegistryKey, Thread};

use super::completion::{completion, Finish, JobResult};
use super::item_clock::ItemClock;
use super::map_chunk;
use super::worker_vm::{CachedEntry, WorkerVm};
use crate::jobs::leaves::entry::{entry_in, module_table};
use crate::jobs::luau::engine_events::deliver as deliver_events;
use crate::jobs::protocol::item::{name_element, Item, ItemArgs};
use crate::jobs::protocol::keys::LaneTurn;
use crate::jobs::protocol::pool_shared::PoolShared;
use crate::jobs::protocol::reply::reply;
use crate::value::read::{Reader, Refusal};
use crate::value::{Limits, Message, TransferErrorKind};
use crate::vm::coroutine;
use crate::vm::{
    error_message, panic_message, return_coroutine, root_coroutine, source_epoch, start_root,
    CommandLog, FailureKind, JobFailure, Outcome, Owner, OwnerIdentity, RootEnd, TaskFailure,
};

/// Answers an item that will not run: finishes its hand-off and rejects its promise with a
/// failure of `kind` naming the job, its module and its entry.
pub(super) fn reject(item: Item, kind: FailureKind, message: String, pool: &PoolShared) {
    // A map chunk that never ran is named by its first element, as one that ran is by the
    // element it was in.
    let message = match &item.args {
        ItemArgs::Map(chunk) => name_element(chunk.first, chunk.total, &message),
        _ => message,
    };
    let failure = JobFailure {
        job: item.job.label(),
        module: Some(item.module().to_path_buf()),
        entry: Some(item.entry().to_string()),
        kind,
        message,
        traceback: None,
    };
    item.job.handoff.finish();
    let outcome = Outcome::Rejected(Arc::new(failure));
    reply(&item.principal, item.reply, outcome, pool);
}

/// What [`claim`] found.
pub(super) enum Claim {
    /// The item is running now: start it.
    Run,
    /// Cancelled while queued: the canceller settled the promise.
    Cancelled,
    /// Its principal has ended, for this reason: refuse it.
    Ended(String),
}

/// Moves the item's hand-off to running, unless it was cancelled while queued or its
/// principal has ended. Reads the item in place: it is moved only once, into its task.
#[inline]
pub(super) fn claim(item: &Item) -> Claim {
    if !item.job.handoff.try_start() {
        return Claim::Cancelled;
    }
    if !item.principal.is_alive() {
        return Claim::Ended(item.principal.end_reason());
    }
    Claim::Run
}

/// Brings the VM up to date for the item: stubs of engine services registered since, engine
/// events raised since (the item is this VM's start point: watchers run before its entry), the
/// key's freshness, and modules whose sources changed.
#[inline]
pub(super) fn prepare(wvm: &mut WorkerVm, item: &Item) {
    wvm.sync_services();
    // Read before the delivery: it takes every event up to at least this sequence number, so
    // while the log stays there, there is nothing new to deliver.
    let events = wvm.principal.events.next_seq();
    if events != wvm.events_seen {
        deliver_events(&wvm.vm, &wvm.principal.events, wvm.principal.max_deadline);
        wvm.events_seen = events;
    }
    if let Some(key) = &item.job.key {
        // Looked up before it is cloned: a key seen before (the common case) costs no clone.
        let fresh = !wvm.keys_seen.contains(key);
        if fresh {
            wvm.keys_seen.insert(key.clone());
        }
        item.job.fresh.store(fresh, Ordering::Relaxed);
    }
    let epoch = source_epoch();
    if wvm.sources_seen != epoch {
        wvm.sources_seen = epoch;
        wvm.vm.core.modules.invalidate_changed();
        // An edit may have changed any module: entries are found anew from the next item.
        wvm.entries.clear();
    }
}

/// Why an item's entry function was not found.
pub(super) enum EntryMissing {
    /// Answer the item with this failure.
    Refused(FailureKind, String),
    /// Host code panicked while the module loaded: answer the item, then go on unwinding.
    Panicked(Box<dyn Any + Send>),
}

/// Finds the item's entry in the VM's cache of entries; on a miss, requires the module, checks
/// that the entry is a function and keeps the module's table and the entry's name. A module
/// that fails to load, or an entry that is not a function, is refused and not kept, so the next
/// item looks again.
#[inline]
pub(super) fn find_entry(wvm: &mut WorkerVm, item: &Item) -> Result<Rc<CachedEntry>, EntryMissing> {
    if let Some(found) = wvm.entries.get(item.module(), item.entry()) {
        return Ok(found.clone());
    }
    let (table, name) = cache_entry(wvm, item)?;
    Ok(wvm.entries.insert(item.module(), item.entry(), table, name))
}

/// Requires the item's module and finds its entry function, the slow way: what a new entry
/// costs once per VM (and per edit), and what words the refusals.
#[cold]
fn cache_entry(wvm: &WorkerVm, item: &Item) -> Result<(RegistryKey, RegistryKey), EntryMissing> {
    let lua = &wvm.vm.lua;
    let load = |e: mlua::Error| EntryMissing::Refused(FailureKind::Load, error_message(&e));
    let name = lua.create_string(item.entry().as_bytes()).map_err(load)?;
    // Requiring the module runs its top level outside any task, where the scheduler can't
    // contain a panic: the caller answers the item first, then lets the panic end the VM.
    let found = catch_unwind(AssertUnwindSafe(|| {
        let table = module_table(lua, &wvm.vm, item.module())?;
        entry_in(&table, item.module(), item.entry(), name.clone())?;
        Ok::<_, String>(table)
    }));
    let table = match found {
        Ok(Ok(table)) => table,
        Ok(Err(e)) => return Err(EntryMissing::Refused(FailureKind::Load, e)),
        Err(payload) => return Err(EntryMissing::Panicked(payload)),
    };
    let table = lua.create_registry_value(table).map_err(load)?;
    let name = lua.create_registry_value(name).map_err(load)?;
    Ok((table, name))
}

/// Builds the entry's arguments on the coroutine (above the function); answers how many it
/// pushed, or why they could not be built. A scalar is pushed straight; anything else is built
/// in one protected call of the VM's pusher (a `parallelFor` chunk's table through mlua).
#[inline]
fn entry_args(wvm: &mut WorkerVm, thread: &Thread, args: &ItemArgs) -> Result<c_int, String> {
    let built = match args {
        // SAFETY: the coroutine is not running and holds only its function: room for one.
        ItemArgs::Plain(message) if unsafe { coroutine::push_scalar(thread, message) } => {
            return Ok(1)
        }
        ItemArgs::Plain(message) => push_built(wvm, thread, message),
        args => push_value(&wvm.vm.lua, thread, args),
    };
    built
        .map(|()| 1)
        .map_err(|e| format!("its arguments could not be read: {}", error_message(&e)))
}

/// Builds a message that allocates onto the coroutine, through the VM's protected pusher.
#[cold]
fn push_built(wvm: &mut WorkerVm, thread: &Thread, message: &Message) -> mlua::Result<()> {
    let lua = &wvm.vm.lua;
    if wvm.pusher.is_none() {
        wvm.pusher = Some(coroutine::protected_pusher(lua)?);
    }
    let Some(pusher) = &wvm.pusher else {
        unreachable!("the pusher was made above")
    };
    // SAFETY: the coroutine is not running and holds only its function; the pusher was made
    // on this VM.
    unsafe { coroutine::push_protected(lua, thread, pusher, message) }
}

/// Builds arguments through mlua (a `parallelFor` chunk's table) and moves them over.
#[cold]
fn push_value(lua: &Lua, thread: &Thread, args: &ItemArgs) -> mlua::Result<()> {
    let value = args.to_lua(lua)?;
    lua.exec_raw_lua(|raw| {
        // SAFETY: the value is pushed on the calling state under mlua's contract, then moved
        // to the coroutine, which has room for it (it holds only its function).
        unsafe {
            if ffi::lua_checkstack(raw.state(), 1) == 0 {
                return Err(mlua::Error::StackError);
            }
            raw.push(value)?;
            ffi::lua_xmove(raw.state(), thread.state(), 1);
        }
        Ok(())
    })
}

/// Copies the first value a job returned, in place on its coroutine's stack: what its promise
/// resolves with. A userdata (a resource handle) is taken as an mlua value, and a wrapped panic
/// met there is contained as the job's failure.
fn first_value(lua: &Lua, thread: &Thread, count: c_int) -> JobResult {
    let co = thread.state();
    if count == 0 {
        return Ok(Ok((Message::Nil, Limits::NODE_WEIGHT)));
    }
    // SAFETY: index 1 is the first returned value; reading its type can't raise.
    let ty = unsafe { ffi::lua_type(co, 1) };
    if ty == ffi::LUA_TUSERDATA {
        return first_userdata(lua, co);
    }
    lua.exec_raw_lua(|raw| {
        let mut reader = Reader::on(raw, co, Limits::MAX_MESSAGE_BYTES);
        // SAFETY: index 1 is valid on the coroutine and of type `ty`; the reader restores its
        // top.
        let read = unsafe { reader.read_typed_at(ty, 1) };
        Ok(read
            .map(|message| (message, reader.weight()))
            .map_err(|r| r.into_error("result")))
    })
}

/// A userdata returned first, read as an mlua value (as a task's other results are).
#[cold]
fn first_userdata(lua: &Lua, co: *mut ffi::lua_State) -> JobResult {
    let taken = catch_unwind(AssertUnwindSafe(|| {
        lua.exec_raw_lua(|raw| {
            // SAFETY: a copy of index 1 moves to the calling state after room is made there;
            // pop_value takes it off.
            unsafe {
                if ffi::lua_checkstack(raw.state(), 1) == 0 {
                    return None;
                }
                ffi::lua_pushvalue(co, 1);
                ffi::lua_xmove(co, raw.state(), 1);
                Some(raw.pop_value())
            }
        })
    }));
    match taken {
        Ok(Some(value)) => Ok(Message::read_weighed(&value, "result")),
        // No room to take it: refused as the reader refuses a value it has no stack for.
        Ok(None) => Ok(Err(Refusal::new(TransferErrorKind::TooDeep {
            max_depth: Limits::MAX_DEPTH,
        })
        .into_error("result"))),
        Err(panic) => Err(TaskFailure::panicked(&panic)),
    }
}

/// Starts the item's root task under a new owner (the job, with a command log and the item's
/// authority) on a coroutine of its VM: the entry read raw from the module's table onto the
/// coroutine, its arguments pushed above it, and its first run made fresh (`vm::start_root`).
/// A job that returns in that run is answered here, its result read in place; one that stays
/// suspended is entered in `running` and given the completion that answers it later. The
/// item's copy of its arguments, and what it held of the job budget, go first: the arguments
/// live in the VM now, and its result is charged when it returns.
#[inline(always)]
pub(super) fn launch(
    wvm: &mut WorkerVm,
    item: Item,
    cached: Rc<CachedEntry>,
    (clock, turn): (Option<ItemClock>, Option<LaneTurn>),
    pool: Arc<PoolShared>,
) {
    if let ItemArgs::Map(_) = &item.args {
        return launch_map(wvm, item, &cached, (clock, turn), pool);
    }
    let thread = match root_coroutine(&*wvm.vm.core, &wvm.vm.lua) {
        Ok(thread) => thread,
        Err(e) => return unstarted(item, (clock, turn), pool, error_message(&e)),
    };
    // SAFETY: the coroutine is empty and not running; the keys are this VM's registry values.
    if !unsafe { coroutine::push_field(&thread, &cached.table, &cached.name) } {
        return_coroutine(&*wvm.vm.core, thread);
        return entry_changed(wvm, item, &pool);
    }
    let nargs = match entry_args(wvm, &thread, &item.args) {
        Ok(n) => n,
        Err(message) => {
            // SAFETY: the coroutine was not started; emptying it readies it for reuse.
            unsafe { ffi::lua_settop(thread.state(), 0) };
            return_coroutine(&*wvm.vm.core, thread);
            return reject(item, FailureKind::Transfer, message, &pool);
        }
    };
    let (finish, owner) = owned(item, (clock, turn), pool, wvm.spare_owner.take());
    let lua = &wvm.vm.lua;
    let ended = start_root(&*wvm.vm.core, lua, thread, nargs, &owner, |end| match end {
        RootEnd::Returned { thread, count } => first_value(lua, thread, count),
        RootEnd::Failed(failure) => Err(failure),
    });
    match ended {
        Some(result) => {
            let commands = owner.commands.as_ref().map(CommandLog::close);
            finish.end(result, commands.unwrap_or_default());
            let mut owner = owner;
            // Nothing the job made holds its owner (no task it spawned is alive): keep the
            // allocation for the next job, holding nothing of this one.
            if let Some(spare) = Rc::get_mut(&mut owner) {
                spare.release(wvm.idle_identity.clone());
                wvm.spare_owner = Some(owner);
            }
        }
        None => {
            let key = Arc::as_ptr(&finish.job);
            owner.set_completion(completion(finish, wvm.running.clone()));
            wvm.running.borrow_mut().insert(key, owner);
        }
    }
}

/// Takes the item apart into what its end needs and the owner its tasks run under; drops its
/// copy of the arguments and its charge.
#[inline(always)]
fn owned(
    item: Item,
    (clock, turn): (Option<ItemClock>, Option<LaneTurn>),
    pool: Arc<PoolShared>,
    spare: Option<Rc<Owner>>,
) -> (Finish, Rc<Owner>) {
    let Item {
        principal,
        job,
        deadline,
        reply: reply_to,
        authority,
        args: spent_args,
        charge: spent_charge,
        ..
    } = item;
    drop((spent_args, spent_charge));
    let owner_label: Arc<dyn OwnerIdentity> = job.clone();
    let made = Owner::job(owner_label, deadline, authority.clone());
    let owner = match spare {
        Some(mut spare) => match Rc::get_mut(&mut spare) {
            Some(slot) => {
                *slot = made;
                spare
            }
            None => Rc::new(made),
        },
        None => Rc::new(made),
    };
    let finish = Finish {
        principal,
        job,
        reply_to,
        // The commands the job recorded apply as the job: under the authority it ran with.
        command_authority: authority,
        clock,
        turn,
        pool,
        map: None,
    };
    (finish, owner)
}

/// Answers an item whose cached entry is no longer a function (the module replaced it): the
/// refusal is worded as a first lookup words it.
#[cold]
fn entry_changed(wvm: &WorkerVm, item: Item, pool: &PoolShared) {
    match cache_entry(wvm, &item) {
        Err(EntryMissing::Refused(kind, message)) => reject(item, kind, message, pool),
        Err(EntryMissing::Panicked(payload)) => {
            let message = TaskFailure::Panicked(panic_message(&payload)).to_string();
            reject(item, FailureKind::Panicked, message, pool);
            resume_unwind(payload);
        }
        // A function again by now: the next item finds it.
        Ok(_) => {
            let message = format!("entry '{}' changed while it was read", item.entry());
            reject(item, FailureKind::Load, message, pool)
        }
    }
}

/// Starts a `jobs.map` chunk: its runner (`map_chunk.rs`) as the root task, called with the
/// entry, the chunk's elements and their count, under a completion that reads the results.
/// Once per chunk rather than per element, so it takes the generic path through mlua.
#[cold]
fn launch_map(
    wvm: &mut WorkerVm,
    item: Item,
    cached: &CachedEntry,
    clock_turn: (Option<ItemClock>, Option<LaneTurn>),
    pool: Arc<PoolShared>,
) {
    let lua = &wvm.vm.lua;
    let entry = (|| {
        let table: mlua::Table = lua.registry_value(&cached.table)?;
        let name: mlua::LuaString = lua.registry_value(&cached.name)?;
        table.raw_get::<mlua::Value>(name)
    })();
    let function = match entry {
        Ok(mlua::Value::Function(function)) => function,
        Ok(_) => return entry_changed(wvm, item, &pool),
        Err(e) => return reject(item, FailureKind::Load, error_message(&e), &pool),
    };
    let started = match &item.args {
        ItemArgs::Map(chunk) => map_chunk::start(lua, function, chunk),
        _ => Err("only a map chunk starts through the map runner".to_owned()),
    };
    let (runner, args, map) = match started {
        Ok(started) => started,
        Err(message) => return reject(item, FailureKind::Transfer, message, &pool),
    };
    let (mut finish, owner) = owned(item, clock_turn, pool, None);
    finish.map = map;
    let key = Arc::as_ptr(&finish.job);
    owner.set_completion(completion(finish, wvm.running.clone()));
    wvm.running.borrow_mut().insert(key, owner.clone());
    if let Err(e) = wvm.vm.start_with(runner, args, owner.clone()) {
        wvm.running.borrow_mut().remove(&key);
        let failure = TaskFailure::raised(error_message(&e), String::new());
        owner.complete(&wvm.vm.lua, Err(failure));
    }
}

/// An item whose task could not be made (no coroutine for it): it fails as raised, naming why.
#[cold]
fn unstarted(
    item: Item,
    clock_turn: (Option<ItemClock>, Option<LaneTurn>),
    pool: Arc<PoolShared>,
    message: String,
) {
    let (finish, owner) = owned(item, clock_turn, pool, None);
    let commands = owner.commands.as_ref().map(CommandLog::close);
    let failure = TaskFailure::raised(message, String::new());
    finish.end(Err(failure), commands.unwrap_or_default());
}
