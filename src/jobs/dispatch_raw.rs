//! `jobs.dispatch` as a raw C function: the common call (module and entry strings, arguments,
//! no `opts`) read straight off the Luau stack, its promise's handle made in place, no `mlua`
//! callback wrapper and no `mlua::Value` per argument. Every other call (options, a refusal, an
//! entry string this VM has not interned yet, a userdata among the arguments) is handed whole
//! to the `mlua` function in upvalue 2 (`api.rs`), which answers or raises exactly as before.
//!
//! # Safety
//!
//! The rule of `vm/promise_handle.rs` holds here: no Rust value that needs dropping is alive
//! across a Luau call that can raise. The call runs in three phases: the handle is made and
//! entered in the VM's table of handles first, while no Rust value exists (a memory error
//! unwinds through this function's plain frame to the script's caller, as any Luau error
//! does); then Rust reads, checks and queues the item, calling only Luau functions that neither
//! allocate nor raise; then, with every Rust value dropped, it answers the handle or hands the
//! call to the slow path. A Rust panic is caught before it reaches Luau.

use std::ffi::{c_int, c_void};
use std::rc::Rc;
use std::time::Instant;

use mlua::{ffi, Function, Lua};

use super::home::{HomeKind, JobsHome};
use super::item::{Item, ItemArgs};
use super::job::{charge_job, JobShared, JOB_WEIGHT};
use crate::principal::capability::current_or;
use crate::value::read::Reader;
use crate::value::{Held, Limits};
use crate::vm::promise_handle::{self, bind, enter_slot, leave_slot, push_handle};
use crate::vm::{caller_source_of, VmCore};

/// What the raw `jobs.dispatch` reaches through its first upvalue: the VM's home and core.
pub(crate) struct DispatchContext {
    home: Rc<JobsHome>,
    core: Rc<VmCore>,
}

/// Makes `jobs.dispatch`: the raw function with `slow` (the `mlua` dispatch) behind it. The
/// context is kept in the VM's app data, so the pointer the function holds lives as long as the
/// VM.
pub(crate) fn dispatch_function(
    lua: &Lua,
    home: Rc<JobsHome>,
    core: Rc<VmCore>,
    slow: Function,
) -> mlua::Result<Function> {
    let context = Rc::new(DispatchContext { home, core });
    let pointer = Rc::as_ptr(&context).cast_mut().cast::<c_void>();
    lua.set_app_data(context);
    // SAFETY: pushes the two upvalues and the closure inside exec_raw's protected call.
    unsafe {
        lua.exec_raw::<Function>(slow, |state| {
            ffi::lua_pushlightuserdata(state, pointer);
            ffi::lua_insert(state, -2);
            ffi::lua_pushcclosurek(state, raw_dispatch, c"dispatch".as_ptr(), 2, None);
        })
    }
}

/// The raw `jobs.dispatch`.
///
/// # Safety
/// Called by Luau only, with upvalue 1 the VM's [`DispatchContext`] and upvalue 2 the slow path.
unsafe extern "C-unwind" fn raw_dispatch(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: as documented; the context outlives every call (the VM's app data holds it).
    let context =
        unsafe { &*ffi::lua_touserdata(state, ffi::lua_upvalueindex(1)).cast::<DispatchContext>() };
    // SAFETY: type tests of this call's own arguments.
    let common = unsafe {
        let nargs = ffi::lua_gettop(state);
        (2..=4).contains(&nargs)
            && ffi::lua_type(state, 1) == ffi::LUA_TSTRING
            && ffi::lua_type(state, 2) == ffi::LUA_TSTRING
            && ffi::lua_type(state, 4) <= ffi::LUA_TNIL
    };
    let Some(tables) = promise_handle::tables(&context.core).filter(|_| common) else {
        // SAFETY: no Rust value is alive.
        return unsafe { promise_handle::call_slow(state) };
    };
    let index = context.core.promises.borrow().next_index();
    // SAFETY: phase one: the handle, made while no Rust value is alive (it may raise), and the
    // stack the argument reader needs, reserved now so that its own check allocates nothing.
    let at = unsafe {
        if ffi::lua_checkstack(state, Reader::STACK_NEEDED) == 0 {
            return promise_handle::call_slow(state);
        }
        ffi::lua_settop(state, 4);
        push_handle(state, tables);
        let at = ffi::lua_gettop(state);
        enter_slot(state, tables, at, index);
        at
    };
    let queued = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: phase two: this call's own stack, the handle at `at`.
        unsafe { dispatch_common(state, context, at, index) }
    }))
    .unwrap_or(false);
    if queued {
        return 1;
    }
    // SAFETY: phase three of a call the fast path did not take: nothing was made for the entry
    // it cleared, and no Rust value is alive.
    unsafe {
        leave_slot(state, tables, index);
        ffi::lua_settop(state, 4);
        promise_handle::call_slow(state)
    }
}

/// Reads, checks and queues the common call; false hands it to the slow path, with nothing
/// made or taken.
///
/// # Safety
/// A raw C function's stack: the module at 1, the entry at 2, the arguments at 3, the unbound
/// handle at `at`, entered under slot `index`. Calls only Luau functions that neither allocate
/// nor raise.
unsafe fn dispatch_common(
    state: *mut ffi::lua_State,
    context: &DispatchContext,
    at: c_int,
    index: u32,
) -> bool {
    let (home, core) = (&*context.home, &*context.core);
    // SAFETY: strings at 1 and 2 (checked by the caller), read in place.
    let (spec, entry_address) = unsafe {
        let mut len = 0usize;
        let data = ffi::lua_tolstring(state, 1, &mut len);
        let spec = std::slice::from_raw_parts(data.cast::<u8>(), len);
        // The entry is known by its text's address, as `LuaString::to_pointer` answers it.
        let entry = ffi::lua_tolstring(state, 2, std::ptr::null_mut());
        (spec, entry as usize)
    };
    let Some(entry) = home.known_entry(entry_address) else {
        return false;
    };
    let Ok(spec) = std::str::from_utf8(spec) else {
        return false;
    };
    // SAFETY: `state` is the running thread; level 1 is the script that called.
    let module = unsafe { caller_source_of(state, |source| core.modules.resolve(source, spec)) };
    let Ok(module) = module else {
        return false;
    };
    let mut reader = Reader::on_state(state, Limits::MAX_MESSAGE_BYTES);
    // SAFETY: index 3 is the arguments' slot (nil when none were given).
    let Ok(args) = (unsafe { reader.read_at(3) }) else {
        return false;
    };
    let weight = reader.weight();
    let budget = &home.principal.job_bytes;
    let Ok(held) = charge_job(budget, JOB_WEIGHT, "jobs.dispatch") else {
        return false;
    };
    let Ok(carried) = charge_job(budget, weight, "jobs.dispatch") else {
        return false;
    };
    let job = JobShared::new(
        None,
        module.spec,
        entry.clone(),
        home.pool.clone(),
        home.principal.id,
        None,
    );
    job.hold(Held::Own(held));
    let cell = {
        let mut promises = core.promises.borrow_mut();
        let cell = promises.make("jobs.dispatch");
        promises.mark_handle(cell.index());
        cell
    };
    debug_assert_eq!(cell.index(), index, "the slot the handle was entered under");
    cell.set_canceller(job.clone());
    let item = Item {
        principal: home.principal.clone(),
        authority: current_or(&home.principal.authority),
        job,
        module: module.path,
        entry,
        args: ItemArgs::Plain(args),
        deadline: home.principal.max_deadline,
        reply: home.reply_to(cell.id()),
        queued_at: home.principal.profile.is_some().then(Instant::now),
        charge: Some(Held::Own(carried)),
    };
    match &home.kind {
        HomeKind::Engine | HomeKind::Actor { .. } => home.pool.inject(item),
        HomeKind::Worker { outbox, .. } => outbox.borrow_mut().push(item),
    }
    // SAFETY: the handle is at `at`; binding allocates nothing.
    unsafe { bind(state, at, cell.index()) };
    true
}
