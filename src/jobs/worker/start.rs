//! The steps of starting one item on a worker, in order: [`claim`] it (a cancelled item is
//! already answered; an ended principal's is refused), [`prepare`] its VM (engine services,
//! engine events, the key's freshness, changed modules), [`find_entry`], build its arguments
//! ([`entry_args`]), and [`launch`] its root task. Any step that fails answers the item with
//! [`reject`]. `LuauWorker::start` (in `mod.rs`) runs them; the VM is found or built there.
//! The steps are `#[inline]`, and [`launch`] `#[inline(always)]`: they were one function, and
//! an item moved through a call costs a copy of it on every item.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use mlua::{Function, Lua, LuaString, MultiValue};

use super::completion::{completion, Finish};
use super::item_clock::ItemClock;
use super::map_chunk::MapRun;
use super::worker_vm::WorkerVm;
use crate::jobs::engine_events::deliver as deliver_events;
use crate::jobs::entry::entry_function;
use crate::jobs::item::{name_element, Item, ItemArgs};
use crate::jobs::keys::LaneTurn;
use crate::jobs::pool_shared::PoolShared;
use crate::jobs::reply::reply;
use crate::value::Message;
use crate::vm::{
    error_message, source_epoch, FailureKind, JobFailure, Outcome, Owner, OwnerIdentity, Resume,
    TaskFailure,
};

/// How many entry names a worker VM keeps as Luau strings.
const ENTRY_KEYS: usize = 256;

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
        module: Some(item.module.to_path_buf()),
        entry: Some(item.entry.to_string()),
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
    deliver_events(&wvm.vm, &wvm.principal.events, wvm.principal.max_deadline);
    if let Some(key) = &item.job.key {
        let fresh = wvm.keys_seen.insert(key.clone());
        item.job.fresh.store(fresh, Ordering::Relaxed);
    }
    let epoch = source_epoch();
    if wvm.sources_seen != epoch {
        wvm.sources_seen = epoch;
        wvm.vm.core.modules.invalidate_changed();
    }
}

/// Why an item's entry function was not found.
pub(super) enum EntryMissing {
    /// Answer the item with this failure.
    Refused(FailureKind, String),
    /// Host code panicked while the module loaded: answer the item, then go on unwinding.
    Panicked(Box<dyn Any + Send>),
}

/// The entry name as a Luau string, kept per VM so a lookup does not intern it each time.
#[inline]
fn entry_key(wvm: &mut WorkerVm, entry: &Arc<str>) -> mlua::Result<LuaString> {
    if let Some(key) = wvm.entry_keys.get(entry) {
        return Ok(key.clone());
    }
    let key = wvm.vm.lua.create_string(&**entry)?;
    if wvm.entry_keys.len() >= ENTRY_KEYS {
        wvm.entry_keys.clear();
    }
    wvm.entry_keys.insert(entry.clone(), key.clone());
    Ok(key)
}

/// Requires the item's module in the VM and finds its entry function.
#[inline]
pub(super) fn find_entry(wvm: &mut WorkerVm, item: &Item) -> Result<Function, EntryMissing> {
    let key = entry_key(wvm, &item.entry)
        .map_err(|e| EntryMissing::Refused(FailureKind::Load, error_message(&e)))?;
    // Requiring the module runs its top level outside any task, where the scheduler can't
    // contain a panic: the caller answers the item first, then lets the panic end the VM.
    let found = catch_unwind(AssertUnwindSafe(|| {
        entry_function(&wvm.vm.lua, &wvm.vm, &item.module, &item.entry, key)
    }));
    match found {
        Ok(Ok(f)) => Ok(f),
        Ok(Err(e)) => Err(EntryMissing::Refused(FailureKind::Load, e)),
        Err(payload) => Err(EntryMissing::Panicked(payload)),
    }
}

/// Builds the entry's arguments in the VM; refuses naming why they could not be read.
#[inline]
pub(super) fn entry_args(lua: &Lua, args: &ItemArgs) -> Result<Resume, String> {
    match args {
        // No `mlua::Value` carries a Luau integer: a top-level one is pushed straight when
        // the task starts (a scalar, so the push allocates nothing and cannot fail).
        ItemArgs::Plain(integer @ Message::Integer(_)) => Ok(Resume::Message(integer.clone())),
        args => match args.to_lua(lua) {
            Ok(v) => Ok(Resume::Args(MultiValue::from_iter([v]))),
            Err(e) => Err(format!(
                "its arguments could not be read: {}",
                error_message(&e)
            )),
        },
    }
}

/// Starts the item's root task under a new owner (the job, with a command log and the item's
/// authority), whose completion replies; a map chunk starts its runner, whose completion reads
/// the results (`map`). The item's copy of its arguments, and what it held of
/// the job budget, go first: the arguments live in the VM now, and its result is charged when
/// it returns.
#[inline(always)]
pub(super) fn launch(
    wvm: &mut WorkerVm,
    item: Item,
    (function, args, map): (Function, Resume, Option<MapRun>),
    (clock, turn): (Option<ItemClock>, Option<LaneTurn>),
    pool: Arc<PoolShared>,
) {
    let Item {
        principal,
        job,
        module,
        entry,
        deadline,
        reply: reply_to,
        authority,
        args: spent_args,
        charge: spent_charge,
        ..
    } = item;
    drop((spent_args, spent_charge));
    let running = wvm.running.clone();
    let key = Arc::as_ptr(&job);
    let owner_label: Arc<dyn OwnerIdentity> = job.clone();
    let completion = completion(Finish {
        principal,
        job,
        module,
        entry,
        reply_to,
        // The commands the job recorded apply as the job: under the authority it ran with.
        command_authority: authority.clone(),
        clock,
        turn,
        pool,
        running: running.clone(),
        map,
    });
    let owner = Rc::new(
        Owner::new(owner_label, deadline, Some(completion))
            .with_commands()
            .with_authority(authority),
    );
    running.borrow_mut().insert(key, owner.clone());
    if let Err(e) = wvm.vm.start_with(function, args, owner.clone()) {
        running.borrow_mut().remove(&key);
        let failure = TaskFailure::raised(error_message(&e), String::new());
        owner.complete(&wvm.vm.lua, Err(failure));
    }
}
