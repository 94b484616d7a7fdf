//! The Luau handle of a promise: a plain table with one metatable per VM, not a userdata.
//!
//! A handle's array part holds its promise's slot in the VM's table of promises ([`SLOT`],
//! plus one), its state ([`STATE`]: pending, resolved, rejected or cancelled) and, once
//! resolved, its value ([`VALUE`]). The promise's state stays homed in its VM's slab
//! (`luau_promise.rs`); a promise with a handle keeps its slot after it settles, for as long as
//! the handle lives, so its outcome, its job's charge and whether code observed a rejection
//! stay in Rust. When it settles its home writes the state, and a resolved value, into
//! the handle ([`publish`]), so `p:await()` of a promise that resolved already reads the value
//! in Luau (the prelude's fast path) without a call into Rust, and a task woken from an await
//! reads it there too. A rejection's text is made only when it is awaited, so a VM that is out
//! of memory raises its out-of-memory text then.
//!
//! Handles are read-only tables whose metatable is protected (`getmetatable(p)` is `false`, as
//! it was for the userdata): scripts can neither write a handle's fields nor give a table of
//! their own the handle metatable. Rust tells a handle by its metatable; the prelude by the VM's
//! weak-valued table of handles by slot (`slots[rawget(p, 1)] == p`), which only Rust fills, so
//! a table that copies a handle's fields is refused by `await`, `status` and `cancel` alike.
//! The same table tells the VM when a handle was collected: a settled promise's slot is freed
//! when its entry is gone ([`free_collected`], run as held slots double, before a job budget
//! refuses, and when the host reads the domain's stats), which drops the job's charge and lets
//! an unobserved rejection be reported as unhandled, as a collected userdata did.
//!
//! # Safety: Luau errors and Rust values
//!
//! Luau is built here with C++ exceptions (`luau0-src` default, no `LUA_USE_LONGJMP`): an error
//! raised inside a Luau API call (a memory error from any allocation, `lua_error`) unwinds as a
//! C++ exception through the `extern "C-unwind"` frames between it and the protected call that
//! catches it. The rule every function here keeps is that no Rust value that needs dropping is
//! alive across a Luau call that can raise: such calls happen either before any Rust value is
//! made (the handle is made first, then the promise) or inside a closure run by [`protected`],
//! whose Rust state lives in the caller's frame outside the protected call. So the frames a
//! raise unwinds through hold only plain data, and the pattern would stay sound if Luau were
//! built with `longjmp` instead, which skips frames without running anything in them. Raw C
//! functions never let a Rust panic reach Luau: each catches it and raises a Luau error after
//! the payload is dropped.

use std::cell::{Cell, RefCell};
use std::ffi::{c_int, c_void};
use std::rc::Rc;

use mlua::{ffi, Error, Function, Lua, RegistryKey, Table, Value};

use super::core::VmCore;
use super::luau_promise::{Outcome, PromiseCell, PromiseId, Settled};
use super::task_library::POOL_PROMISES;
use crate::value::write::write_protected;
use crate::value::Message;

/// The promise's slot plus one (a number): the prelude's key into the table of handles.
const SLOT: c_int = 1;
/// One of the states below. The prelude reads it for [`RESOLVED`] (its fast path).
const STATE: c_int = 2;
/// The resolved value.
const VALUE: c_int = 3;
/// The slots of a handle's array part.
const SLOTS: c_int = 3;

/// [`STATE`] of a promise that has not settled.
pub(crate) const PENDING: i32 = 0;
/// [`STATE`] of a resolved promise: the prelude's `RESOLVED`.
pub(crate) const RESOLVED: i32 = 1;
/// [`STATE`] of a rejected promise.
pub(crate) const REJECTED: i32 = 2;
/// [`STATE`] of a cancelled promise.
pub(crate) const CANCELLED: i32 = 3;

/// The tables behind one VM's handles, reached through registry references.
pub(crate) struct HandleTables {
    /// A pending handle with the handles' metatable, read-only: each handle is a clone of it
    /// (one table copy instead of a table built field by field and given its metatable).
    template: RegistryKey,
    /// Its address: a value is a handle when its metatable is this one.
    metatable_ptr: *const c_void,
    /// Slot + 1 → handle, weak-valued.
    slots: RegistryKey,
    /// `{ on = bool }`: whether the prelude answers settled handles itself.
    reads: RegistryKey,
    /// A C function that runs a Rust closure (see [`protected`]).
    run_op: RegistryKey,
    /// Whether the prelude answers settled handles (off in VMs that run `jobs.warm`
    /// entries, whose awaits of pool work are refused even when settled: the refusal is Rust's).
    luau_reads: Cell<bool>,
    /// Scratch list of held slots, reused by [`free_collected`].
    scratch: RefCell<Vec<u32>>,
}

impl HandleTables {
    /// Sends every await of this VM through Rust: a pool worker's VM, which runs `jobs.warm`
    /// entries.
    pub(crate) fn keep_reads_in_rust(&self, lua: &Lua) -> mlua::Result<()> {
        self.luau_reads.set(false);
        lua.registry_value::<Table>(&self.reads)?
            .raw_set("on", false)
    }
}

/// The tables the prelude reads: the weak-valued table of handles by slot, and the switch of
/// its fast path.
pub(super) struct PreludeTables {
    pub(super) slots: Table,
    pub(super) reads: Table,
}

/// Makes the tables the prelude reads.
pub(super) fn prelude_tables(lua: &Lua) -> mlua::Result<PreludeTables> {
    let slots = lua.create_table()?;
    let mode = lua.create_table()?;
    mode.raw_set("__mode", "v")?;
    slots.set_metatable(Some(mode))?;
    let reads = lua.create_table()?;
    reads.raw_set("on", true)?;
    Ok(PreludeTables { slots, reads })
}

/// Builds the handles' metatable and sets the tables in `core`: `await` is the prelude's
/// `task.await`.
pub(super) fn install(
    lua: &Lua,
    core: &VmCore,
    prelude: PreludeTables,
    await_fn: Function,
) -> mlua::Result<()> {
    let methods = lua.create_table()?;
    methods.raw_set("await", await_fn)?;
    methods.raw_set("status", lua.create_function(status)?)?;
    methods.raw_set("cancel", lua.create_function(cancel)?)?;
    methods.set_readonly(true);
    lua.set_named_registry_value(METHODS_KEY, &methods)?;
    let metatable = lua.create_table()?;
    metatable.raw_set("__index", methods)?;
    metatable.raw_set("__tostring", lua.create_function(to_string)?)?;
    metatable.raw_set("__metatable", false)?;
    metatable.set_readonly(true);
    // SAFETY: `run_op` is a C function that takes one light userdata, as `protected` calls it.
    let run_op = unsafe { lua.create_c_function(run_op) }?;
    let template = lua.create_table_with_capacity(SLOTS as usize, 0)?;
    template.raw_set(STATE, f64::from(PENDING))?;
    template.set_metatable(Some(metatable.clone()))?;
    template.set_readonly(true);
    let tables = HandleTables {
        metatable_ptr: metatable.to_pointer(),
        template: lua.create_registry_value(template)?,
        slots: lua.create_registry_value(prelude.slots)?,
        reads: lua.create_registry_value(prelude.reads)?,
        run_op: lua.create_registry_value(run_op)?,
        luau_reads: Cell::new(true),
        scratch: RefCell::new(Vec::new()),
    };
    let _ = core.handles.set(tables);
    Ok(())
}

/// Registry key of the handles' method table.
const METHODS_KEY: &str = "skein.promise.methods";

/// The `await` the prelude defines (`task.await`), for bindings that park a task on a promise
/// from Luau code of their own.
pub(crate) fn await_function(lua: &Lua) -> mlua::Result<Function> {
    lua.named_registry_value::<Table>(METHODS_KEY)?
        .raw_get("await")
}

/// The tables of the VM `core` belongs to.
fn tables_of(core: &VmCore) -> mlua::Result<&HandleTables> {
    core.handles
        .get()
        .ok_or_else(|| Error::runtime("skein: this VM has no promise handles"))
}

/// Reads the slot of the handle at `idx`, or `None` when the value there is not one of this
/// VM's handles.
///
/// # Safety
/// `idx` is a valid index of `state`, a thread of the VM `tables` belongs to, with one free
/// slot. Reads only: no allocation, no raise.
unsafe fn slot_at(state: *mut ffi::lua_State, idx: c_int, tables: &HandleTables) -> Option<u32> {
    // SAFETY: type tests and a raw read of a table's array part (see above).
    unsafe {
        if ffi::lua_type(state, idx) != ffi::LUA_TTABLE
            || ffi::lua_getmetatablepointer(state, idx) != tables.metatable_ptr
        {
            return None;
        }
        ffi::lua_rawgeti_(state, idx, SLOT);
        let slot = ffi::lua_tonumberx(state, -1, std::ptr::null_mut());
        ffi::lua_settop(state, -2);
        (slot >= 1.0).then_some((slot - 1.0) as u32)
    }
}

/// The promise behind a Luau value, if it is one of this VM's promise handles.
pub(crate) fn promise_of(lua: &Lua, value: &Value) -> Option<Rc<PromiseCell>> {
    let Value::Table(_) = value else {
        return None;
    };
    let core = VmCore::of(lua).ok()?;
    let tables = tables_of(&core).ok()?;
    let slot = lua.exec_raw_lua(|raw| {
        let state = raw.state();
        // SAFETY: two checked slots: the value, and the one `slot_at` reads into; the top is
        // restored after.
        unsafe {
            if ffi::lua_checkstack(state, 2) == 0 {
                return None;
            }
            let top = ffi::lua_gettop(state);
            let slot = match raw.push_value(value) {
                Ok(()) => slot_at(state, -1, tables),
                Err(_) => None,
            };
            ffi::lua_settop(state, top);
            slot
        }
    })?;
    let cell = core.promises.borrow().at_slot(slot).cloned();
    cell
}

/// `p:status()`. Answering `"rejected"` counts as the rejection being observed.
fn status(lua: &Lua, this: Value) -> mlua::Result<&'static str> {
    let cell = promise_of(lua, &this).ok_or_else(|| not_a_handle("PromiseHandle:status", &this))?;
    Ok(cell.status())
}

/// `p:cancel()`: settles the promise as cancelled and stops its work; false when it had
/// settled already.
fn cancel(lua: &Lua, this: Value) -> mlua::Result<bool> {
    let cell = promise_of(lua, &this).ok_or_else(|| not_a_handle("PromiseHandle:cancel", &this))?;
    super::core::cancel_promise(lua, &cell)
}

/// `tostring(p)`: `PromiseHandle(jobs.dispatch, pending)`.
fn to_string(lua: &Lua, this: Value) -> mlua::Result<String> {
    let cell =
        promise_of(lua, &this).ok_or_else(|| not_a_handle("PromiseHandle:__tostring", &this))?;
    Ok(format!("PromiseHandle({}, {})", cell.what, cell.status()))
}

/// The error a method called on something other than a handle raises, naming the method:
/// `PromiseHandle:status: self must be a promise, got a table; call it as promise:status(...)`.
fn not_a_handle(method: &str, value: &Value) -> Error {
    super::not_self(method, "promise", value)
}

/// Makes the Luau handle of a promise: pending, or holding its outcome when it settled
/// already.
pub(crate) fn handle(lua: &Lua, cell: Rc<PromiseCell>) -> mlua::Result<Value> {
    let core = VmCore::of(lua)?;
    let tables = tables_of(&core)?;
    if core.promises.borrow().freeing_due() {
        free_collected(lua, &core);
    }
    let outcome = cell.settled_outcome();
    let index = match outcome {
        None => cell.index(),
        // It settled before its handle was made, and gave up its slot: it takes a new one.
        Some(_) => core.promises.borrow_mut().adopt(&cell),
    };
    let mut failure = None;
    // SAFETY: exec_raw runs the closure inside a protected call on `state`, so a memory error
    // is caught there; the closure's Rust state (`outcome`, `failure`) lives in this frame. It
    // leaves the handle on top, which exec_raw answers.
    let made = unsafe {
        lua.exec_raw::<Value>((), |state| {
            ffi::lua_rawcheckstack(state, 4);
            push_handle(state, tables);
            let at = ffi::lua_gettop(state);
            enter_slot(state, tables, at, index);
            if let Some(outcome) = &outcome {
                if !write_outcome(lua, state, at, outcome, &mut failure) {
                    return;
                }
            }
            bind(state, at, index);
        })
    };
    if let Some(err) = failure {
        return Err(err);
    }
    let made = made.map_err(|e| core.named_error(e, "a promise handle"))?;
    core.promises.borrow_mut().mark_handle(index);
    Ok(made)
}

/// Pushes a new, unbound handle: pending, with the handles' metatable. Not read-only until
/// [`bind`].
///
/// # Safety
/// `state` is a thread of the VM `tables` belongs to, with two free slots. Allocates: may raise
/// a memory error, so no Rust value that needs dropping may be alive in the caller.
pub(crate) unsafe fn push_handle(state: *mut ffi::lua_State, tables: &HandleTables) {
    // SAFETY: as documented; the template is read from the registry, cloned, and dropped.
    unsafe {
        ffi::lua_rawgeti_(state, ffi::LUA_REGISTRYINDEX, tables.template.id());
        clone_handle(state, -1);
        ffi::lua_replace(state, -2);
    }
}

/// Pushes a new, unbound handle cloned from the template at `template` (an index that
/// [`push_templates`] filled, or one of a C function's upvalues).
///
/// # Safety
/// As [`push_handle`], with one free slot; `template` holds the template.
pub(crate) unsafe fn clone_handle(state: *mut ffi::lua_State, template: c_int) {
    // SAFETY: as documented; a clone is writable (`luaH_clone` clears `readonly`) and keeps
    // the template's metatable and array part, so [`bind`] and a settle write into slots that
    // exist and allocate nothing.
    unsafe { ffi::lua_clonetable(state, template) }
}

/// Pushes the handle template and the table of handles by slot, in that order: the upvalues a
/// raw C function that makes handles keeps, so it reads neither from the registry.
///
/// # Safety
/// `state` is a thread of the VM `tables` belongs to, with two free slots. Raw reads only.
pub(crate) unsafe fn push_templates(state: *mut ffi::lua_State, tables: &HandleTables) {
    // SAFETY: as documented.
    unsafe {
        ffi::lua_rawgeti_(state, ffi::LUA_REGISTRYINDEX, tables.template.id());
        ffi::lua_rawgeti_(state, ffi::LUA_REGISTRYINDEX, tables.slots.id());
    }
}

/// Enters the handle at `at` in the table of handles under slot `index`.
///
/// # Safety
/// As [`push_handle`]: may raise a memory error (the table may grow).
pub(crate) unsafe fn enter_slot(
    state: *mut ffi::lua_State,
    tables: &HandleTables,
    at: c_int,
    index: u32,
) {
    // SAFETY: as documented; two slots.
    unsafe {
        ffi::lua_rawgeti_(state, ffi::LUA_REGISTRYINDEX, tables.slots.id());
        enter_slot_in(state, ffi::lua_gettop(state), at, index);
        ffi::lua_settop(state, -2);
    }
}

/// Enters the handle at `at` in the table of handles at `slots` (an absolute or pseudo-index,
/// not one relative to the top) under slot `index`.
///
/// # Safety
/// As [`push_handle`], with one free slot: may raise a memory error (the table may grow).
pub(crate) unsafe fn enter_slot_in(
    state: *mut ffi::lua_State,
    slots: c_int,
    at: c_int,
    index: u32,
) {
    // SAFETY: as documented.
    unsafe {
        ffi::lua_pushvalue(state, at);
        ffi::lua_rawseti_(state, slots, slot_key(index));
    }
}

/// Takes back an entry [`enter_slot_in`] made in the table of handles at `slots` (an absolute
/// or pseudo-index), when no promise was made for it.
///
/// # Safety
/// `index` was entered (its key exists, so clearing it allocates nothing); one free slot.
pub(crate) unsafe fn leave_slot_in(state: *mut ffi::lua_State, slots: c_int, index: u32) {
    // SAFETY: as documented.
    unsafe {
        ffi::lua_pushnil(state);
        ffi::lua_rawseti_(state, slots, slot_key(index));
    }
}

fn slot_key(index: u32) -> c_int {
    c_int::try_from(index).map_or(c_int::MAX, |i| i.saturating_add(1))
}

/// Writes the promise's slot into the handle at `at` and makes it read-only.
///
/// # Safety
/// `at` holds a handle [`push_handle`] made; one free slot. Allocates nothing (the slot's
/// field is in the array part), so it can't raise.
pub(crate) unsafe fn bind(state: *mut ffi::lua_State, at: c_int, index: u32) {
    // SAFETY: as documented.
    unsafe {
        ffi::lua_pushnumber(state, f64::from(index) + 1.0);
        ffi::lua_rawseti_(state, at, SLOT);
        ffi::lua_setreadonly(state, at, 1);
    }
}

/// Writes `outcome`'s state, and a resolved value, into the (writable) handle at `at`. Answers
/// false, with `failure` set, when the value can't be built for a reason of Rust's (a limit).
///
/// # Safety
/// Inside a protected call on `state`, `lua`'s current state, with one free slot. May raise.
unsafe fn write_outcome(
    lua: &Lua,
    state: *mut ffi::lua_State,
    at: c_int,
    outcome: &Outcome,
    failure: &mut Option<Error>,
) -> bool {
    // SAFETY: as documented.
    unsafe {
        let code = match outcome {
            Outcome::Resolved(message) => {
                if !write_protected(lua, state, message, failure) {
                    return false;
                }
                ffi::lua_rawseti_(state, at, VALUE);
                RESOLVED
            }
            Outcome::Rejected(_) => REJECTED,
            Outcome::Cancelled => CANCELLED,
        };
        ffi::lua_pushnumber(state, f64::from(code));
        ffi::lua_rawseti_(state, at, STATE);
        true
    }
}

/// Writes a settled promise into its handle (if it has one) and queues its waiters, who read
/// the outcome from the handle when they resume.
pub(crate) fn publish(lua: &Lua, core: &VmCore, settled: Settled) {
    if let (Some(index), Some(tables)) = (settled.held, core.handles.get()) {
        write_settled(lua, core, tables, index, &settled.outcome);
    }
    core.wake(settled.waiters);
}

fn write_settled(lua: &Lua, core: &VmCore, tables: &HandleTables, index: u32, outcome: &Outcome) {
    if let Some(found) = write_without_allocating(lua, tables, index, outcome) {
        if !found {
            // The handle was collected before the promise settled: nothing can read the slot.
            core.promises.borrow_mut().free_held(index);
        }
        return;
    }
    let mut failure = None;
    let mut found = false;
    let ok = protected(lua, tables, |state| {
        // SAFETY: inside `protected`'s call on `state` (see the module's safety section).
        unsafe {
            let Some(at) = find_handle(state, tables, index) else {
                return;
            };
            found = true;
            ffi::lua_setreadonly(state, at, 0);
            if write_outcome(lua, state, at, outcome, &mut failure) {
                ffi::lua_setreadonly(state, at, 1);
            }
        }
    });
    if !found && ok {
        // The handle was collected before the promise settled: nothing can read the slot.
        core.promises.borrow_mut().free_held(index);
        return;
    }
    if !ok || failure.is_some() {
        write_failed(lua, core, tables, index, failure);
    }
}

/// The state code of an outcome that needs no allocation to write into its handle (a scalar
/// value, or only a state), or `None` when its value must be built.
fn scalar_code(outcome: &Outcome) -> Option<i32> {
    match outcome {
        Outcome::Resolved(
            Message::Nil
            | Message::Boolean(_)
            | Message::Integer(_)
            | Message::Number(_)
            | Message::Vector(_),
        ) => Some(RESOLVED),
        Outcome::Resolved(_) => None,
        Outcome::Rejected(_) => Some(REJECTED),
        Outcome::Cancelled => Some(CANCELLED),
    }
}

/// Writes an outcome that needs no allocation (a scalar value, or only a state) straight into
/// its handle, without a protected call: nothing in it can raise. Answers whether the handle
/// was found, or `None` when the outcome needs building.
fn write_without_allocating(
    lua: &Lua,
    tables: &HandleTables,
    index: u32,
    outcome: &Outcome,
) -> Option<bool> {
    let code = scalar_code(outcome)?;
    lua.exec_raw_lua(|raw| {
        let state = raw.state();
        // SAFETY: three checked slots (checking can grow the stack, as mlua's own pushes do
        // outside protected calls); `write_scalar` allocates nothing, and the top is restored.
        unsafe {
            if ffi::lua_checkstack(state, 3) == 0 {
                return None;
            }
            ffi::lua_rawgeti_(state, ffi::LUA_REGISTRYINDEX, tables.slots.id());
            let slots = ffi::lua_gettop(state);
            let found = write_scalar(state, slots, index, code, outcome);
            ffi::lua_settop(state, slots - 1);
            Some(found)
        }
    })
}

/// Writes `outcome` (whose [`scalar_code`] is `code`) into the handle of slot `index`, found in
/// the table of handles at `slots`; answers false when the handle was collected. The stack is
/// left as it was.
///
/// # Safety
/// `slots` is an absolute index holding the table of handles; two free slots. Raw reads,
/// scalar pushes and writes into the handle's preallocated array part: nothing allocates, so
/// nothing can raise.
unsafe fn write_scalar(
    state: *mut ffi::lua_State,
    slots: c_int,
    index: u32,
    code: i32,
    outcome: &Outcome,
) -> bool {
    // SAFETY: as documented.
    unsafe {
        if ffi::lua_rawgeti_(state, slots, slot_key(index)) != ffi::LUA_TTABLE {
            ffi::lua_settop(state, slots);
            return false;
        }
        let at = slots + 1;
        ffi::lua_setreadonly(state, at, 0);
        if let Outcome::Resolved(message) = outcome {
            match message {
                Message::Boolean(b) => ffi::lua_pushboolean(state, c_int::from(*b)),
                Message::Integer(i) => ffi::lua_pushinteger64(state, *i),
                Message::Number(n) => ffi::lua_pushnumber(state, *n),
                Message::Vector([x, y, z]) => ffi::lua_pushvector(state, *x, *y, *z),
                _ => ffi::lua_pushnil(state),
            }
            ffi::lua_rawseti_(state, at, VALUE);
        }
        ffi::lua_pushnumber(state, f64::from(code));
        ffi::lua_rawseti_(state, at, STATE);
        ffi::lua_setreadonly(state, at, 1);
        ffi::lua_settop(state, slots);
        true
    }
}

/// Settles each promise of `batch` in order, as [`VmCore::settle_if_pending`] does one by one,
/// and empties it. Runs of outcomes that need nothing built are written under one raw call and one
/// read of the table of handles; an outcome that needs building takes the one-by-one path, in
/// its turn, so the tasks woken are queued in the order the outcomes came.
pub(crate) fn settle_batch(lua: &Lua, core: &VmCore, batch: &mut Vec<(PromiseId, Outcome)>) {
    let mut rest = batch.drain(..);
    loop {
        let next = match core.handles.get() {
            Some(tables) => settle_scalars(lua, core, tables, &mut rest),
            None => rest.next(),
        };
        let Some((id, outcome)) = next else {
            return;
        };
        core.settle_if_pending(lua, id, outcome);
    }
}

/// Settles outcomes from `rest` while each needs nothing built; answers the first that does
/// (or any, when the stack can't be checked), for the caller to settle one by one.
fn settle_scalars(
    lua: &Lua,
    core: &VmCore,
    tables: &HandleTables,
    rest: &mut impl Iterator<Item = (PromiseId, Outcome)>,
) -> Option<(PromiseId, Outcome)> {
    lua.exec_raw_lua(|raw| {
        let state = raw.state();
        // SAFETY: three checked slots: the table of handles, a handle and a value. Nothing
        // here allocates in the VM or raises (see `write_scalar`); the top is restored.
        unsafe {
            if ffi::lua_checkstack(state, 3) == 0 {
                return rest.next();
            }
            ffi::lua_rawgeti_(state, ffi::LUA_REGISTRYINDEX, tables.slots.id());
            let slots = ffi::lua_gettop(state);
            let mut slow = None;
            for (id, outcome) in rest.by_ref() {
                let Some(code) = scalar_code(&outcome) else {
                    slow = Some((id, outcome));
                    break;
                };
                let settled = core.promises.borrow_mut().settle(id, outcome);
                let Some(settled) = settled else {
                    continue;
                };
                if let Some(index) = settled.held {
                    if !write_scalar(state, slots, index, code, &settled.outcome) {
                        // The handle was collected before the promise settled.
                        core.promises.borrow_mut().free_held(index);
                    }
                }
                core.wake(settled.waiters);
            }
            ffi::lua_settop(state, slots - 1);
            slow
        }
    })
}

/// Pushes the table of handles, then the handle of slot `index` above it: answers the
/// handle's index, or `None` (nothing pushed) when the handle was collected. The caller pops
/// both (`lua_settop(state, at - 2)`, or its protected call's end).
///
/// # Safety
/// Two free slots. Raw reads: allocates nothing.
unsafe fn find_handle(
    state: *mut ffi::lua_State,
    tables: &HandleTables,
    index: u32,
) -> Option<c_int> {
    // SAFETY: as documented.
    unsafe {
        ffi::lua_rawgeti_(state, ffi::LUA_REGISTRYINDEX, tables.slots.id());
        if ffi::lua_rawgeti_(state, -1, slot_key(index)) != ffi::LUA_TTABLE {
            ffi::lua_settop(state, -3);
            return None;
        }
        Some(ffi::lua_gettop(state))
    }
}

/// A resolved value could not be built in the VM (out of memory, or past a limit of Rust's):
/// the handle is marked rejected, and its awaiter raises the reason, kept in the slot's cell
/// for it, instead of waiting forever. Writing a state allocates nothing.
#[cold]
fn write_failed(
    lua: &Lua,
    core: &VmCore,
    tables: &HandleTables,
    index: u32,
    failure: Option<Error>,
) {
    let text = match &failure {
        Some(err) => super::error_message(err),
        None => core.memory.hit(Some("the outcome of an awaited promise")),
    };
    if let Some(cell) = core.promises.borrow().at_slot(index) {
        cell.unbuildable(text);
    }
    let _ = protected(lua, tables, |state| {
        // SAFETY: inside `protected`'s call on `state`; the state's field is in the handle's
        // array part, so the write allocates nothing.
        unsafe {
            let Some(at) = find_handle(state, tables, index) else {
                return;
            };
            ffi::lua_setreadonly(state, at, 0);
            ffi::lua_pushnumber(state, f64::from(REJECTED));
            ffi::lua_rawseti_(state, at, STATE);
            ffi::lua_setreadonly(state, at, 1);
        }
    });
}

/// Frees the slots of settled promises whose handles the collector cleared: their job's
/// charge is given back, and a rejection nobody observed becomes unhandled.
pub(crate) fn free_collected(lua: &Lua, core: &VmCore) {
    let Some(tables) = core.handles.get() else {
        return;
    };
    let held = core.promises.borrow().held_slots();
    let mut scratch = tables.scratch.borrow_mut();
    scratch.clear();
    lua.exec_raw_lua(|raw| {
        let state = raw.state();
        // SAFETY: two checked slots; raw reads of a table allocate nothing.
        unsafe {
            if ffi::lua_checkstack(state, 2) == 0 {
                return;
            }
            ffi::lua_rawgeti_(state, ffi::LUA_REGISTRYINDEX, tables.slots.id());
            for index in held {
                if ffi::lua_rawgeti_(state, -1, slot_key(index)) == ffi::LUA_TNIL {
                    scratch.push(index);
                }
                ffi::lua_settop(state, -2);
            }
            ffi::lua_settop(state, -2);
        }
    });
    let mut promises = core.promises.borrow_mut();
    for index in scratch.drain(..) {
        promises.free_held(index);
    }
    promises.freed();
}

/// Runs `op` on the VM's current state inside a protected call; answers false when it raised
/// (a memory error). `op` must keep the rule of the module's safety section: whatever Rust
/// value it needs lives in the caller, outside the call.
fn protected(lua: &Lua, tables: &HandleTables, mut op: impl FnMut(*mut ffi::lua_State)) -> bool {
    lua.exec_raw_lua(|raw| {
        let state = raw.state();
        let mut op_ref: &mut dyn FnMut(*mut ffi::lua_State) = &mut op;
        // SAFETY: three checked slots hold `run_op` and its argument; `run_op` calls `op`
        // through the pointer, which lives until `lua_pcall` returns; the top is restored.
        unsafe {
            if ffi::lua_checkstack(state, 3) == 0 {
                return false;
            }
            let top = ffi::lua_gettop(state);
            ffi::lua_rawgeti_(state, ffi::LUA_REGISTRYINDEX, tables.run_op.id());
            ffi::lua_pushlightuserdata(state, (&raw mut op_ref).cast());
            let status = ffi::lua_pcall(state, 1, 0, 0);
            ffi::lua_settop(state, top);
            status == ffi::LUA_OK
        }
    })
}

/// The C function behind [`protected`]: calls the closure its light userdata points at.
unsafe extern "C-unwind" fn run_op(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: `protected` passes a pointer to a live `&mut dyn FnMut` as the only argument.
    unsafe {
        let op = ffi::lua_touserdata(state, 1).cast::<&mut dyn FnMut(*mut ffi::lua_State)>();
        ffi::lua_settop(state, 0);
        (*op)(state);
    }
    0
}

/// `P.await(promise)`, the native half of `task.await`, as a raw C function: a resolved
/// handle's `(true, value)` or, for a pending one, parks the running task and answers nil.
/// Whatever is not that common case (a value that is not a handle, a rejection whose text is
/// made now, an await refused, a coroutine the scheduler has not seen) is handed to the `mlua`
/// function in upvalue 2, which answers or raises for it.
///
/// # Safety
/// Called by Luau only, with upvalue 1 the VM's `VmCore` (alive as long as the VM) and upvalue
/// 2 the slow path.
pub(super) unsafe extern "C-unwind" fn raw_await(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: as documented: upvalue 1 points at the VM's core, which outlives every call.
    let core = unsafe { &*ffi::lua_touserdata(state, ffi::lua_upvalueindex(1)).cast::<VmCore>() };
    let answered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: this call's own stack, index 1 its argument.
        unsafe { await_fast(state, core) }
    }))
    .unwrap_or(None);
    match answered {
        Some(results) => results,
        // SAFETY: no Rust value is alive here (a panic's payload was dropped above).
        None => unsafe { call_slow(state) },
    }
}

/// The common cases of `P.await`; `None` hands the call to the slow path.
///
/// # Safety
/// A raw C function's own stack; pushes at most two values, none of which allocates.
unsafe fn await_fast(state: *mut ffi::lua_State, core: &VmCore) -> Option<c_int> {
    let tables = core.handles.get()?;
    // SAFETY: index 1 is the argument (or none, which `slot_at` refuses).
    let index = unsafe { slot_at(state, 1, tables) }?;
    let cell = core.promises.borrow().at_slot(index).cloned()?;
    let pool = POOL_PROMISES.contains(&cell.what);
    if pool && core.current_owner().identity.warm().is_some() {
        return None;
    }
    if !cell.is_pending() {
        if !matches!(
            cell.settled_outcome().as_deref(),
            Some(Outcome::Resolved(_))
        ) {
            return None;
        }
        drop(cell);
        // SAFETY: two pushes into a C function's free slots; reading the value allocates
        // nothing.
        unsafe {
            ffi::lua_pushboolean(state, 1);
            ffi::lua_rawgeti_(state, 1, VALUE);
        }
        return Some(2);
    }
    if let Some(key) = cell.key() {
        if core.current_owner().identity.key() == Some(&key[..]) {
            return None;
        }
    }
    if pool && core.pool_wait_limited() {
        return None;
    }
    let task = core.task_at(state.cast_const().cast())?;
    cell.add_waiter(task);
    core.sched.borrow_mut().park_promise(task, pool);
    drop(cell);
    // SAFETY: one push into a C function's free slots.
    unsafe { ffi::lua_pushnil(state) };
    Some(1)
}

/// The handle tables of a VM, for the `jobs` layer's raw dispatch.
pub(crate) fn tables(core: &VmCore) -> Option<&HandleTables> {
    core.handles.get()
}

/// Calls the slow path (upvalue 2) with this call's arguments and answers its results.
///
/// # Safety
/// A raw C function's own stack; no Rust value that needs dropping may be alive in the caller.
pub(crate) unsafe fn call_slow(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: as documented; the call may raise, which unwinds through plain frames only.
    unsafe {
        let nargs = ffi::lua_gettop(state);
        ffi::lua_pushvalue(state, ffi::lua_upvalueindex(2));
        ffi::lua_insert(state, 1);
        ffi::lua_call(state, nargs, ffi::LUA_MULTRET);
        ffi::lua_gettop(state)
    }
}

/// Makes `P.await`: [`raw_await`] with its core and the slow path `slow`.
pub(super) fn raw_await_function(
    lua: &Lua,
    core: &Rc<VmCore>,
    slow: Function,
) -> mlua::Result<Function> {
    let core_ptr = Rc::as_ptr(core).cast_mut().cast::<c_void>();
    // SAFETY: pushes the two upvalues and the closure inside exec_raw's protected call; the
    // core pointer stays valid while the VM lives (the VM's app data holds the core).
    unsafe {
        lua.exec_raw::<Function>(slow, |state| {
            ffi::lua_pushlightuserdata(state, core_ptr);
            ffi::lua_insert(state, -2);
            ffi::lua_pushcclosurek(state, raw_await, c"await".as_ptr(), 2, None);
        })
    }
}
