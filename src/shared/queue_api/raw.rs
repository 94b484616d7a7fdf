//! `P.pop` as a raw C function: a queue's front value taken and pushed without `mlua`'s
//! callback machinery, which was most of what a ready `q:pop()` cost.
//!
//! The raw function finds the queue through the VM's weak-keyed table from handle to the queue's
//! address (light userdata), filled as each handle is made: the handle holds the queue, so while
//! the handle is on the stack the address is good, and a collected handle's entry goes with it.
//! Every call it does not take (anything but a handle, an empty, closed or ended queue, a VM
//! with parked pops to sweep first) is handed whole to the `mlua` primitive in upvalue 2, before
//! anything was taken, so the second try meets the same queue.
//!
//! # Safety
//!
//! As in `vm/promise_handle.rs`, no Rust value that needs dropping is alive across a Luau call
//! that can raise. The value taken is parked in [`RawPop::stash`], not on the Rust stack, while
//! it is pushed: a scalar is pushed with no allocation, a string with `lua_pushlstring` (which may
//! raise; the stash keeps the bytes until the next pop replaces them), and anything else by
//! calling the `mlua` function in upvalue 4, which takes the value out of the stash and builds
//! it inside `mlua`'s own protection. A value whose push fails for want of memory is lost, as it
//! is when `mlua` pushes a callback's answer.

use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::rc::{Rc, Weak};

use mlua::{ffi, Function, Lua, Table, Value};

use super::Poppers;
use crate::value::write::push_scalar;
use crate::value::Message;
use crate::vm::promise_handle::call_slow;

use super::super::queue::SharedQueue;

/// One VM's state for the raw `P.pop`, reached through its first upvalue.
pub(super) struct RawPop {
    poppers: Weak<Poppers>,
    /// The value being pushed: see the module's safety section.
    stash: UnsafeCell<Option<Message>>,
}

/// Upvalue 3: handle → queue address, weak-keyed.
const ADDRESSES: c_int = 3;
/// Upvalue 4: the `mlua` function that pushes the stashed value.
const BUILD: c_int = 4;

/// The raw `P.pop`, with `slow` (the `mlua` primitive) behind it and `addresses` the VM's
/// weak-keyed table from handle to queue address.
pub(super) fn pop_function(
    lua: &Lua,
    poppers: Weak<Poppers>,
    slow: Function,
    addresses: &Table,
) -> mlua::Result<Function> {
    let context = Rc::new(RawPop {
        poppers,
        stash: UnsafeCell::new(None),
    });
    let pointer = Rc::as_ptr(&context).cast_mut().cast::<c_void>();
    let held = context.clone();
    let build = lua.create_function(move |_, ()| {
        // SAFETY: one VM runs on one thread; the raw pop parked the value just before calling.
        Ok(unsafe { (*held.stash.get()).take() }.unwrap_or(Message::Nil))
    })?;
    lua.set_app_data(context);
    // SAFETY: pushes the upvalues and the closure inside exec_raw's protected call; the context
    // lives as long as the VM (its app data holds it).
    unsafe {
        lua.exec_raw::<Function>((slow, Value::Table(addresses.clone()), build), |state| {
            ffi::lua_pushlightuserdata(state, pointer);
            ffi::lua_insert(state, 1);
            ffi::lua_pushcclosurek(state, raw_pop, c"pop".as_ptr(), 4, None);
        })
    }
}

/// Notes `handle` as the handle of `queue` in `addresses`.
pub(super) fn note_handle(
    addresses: &Table,
    handle: &Value,
    queue: &SharedQueue,
) -> mlua::Result<()> {
    let address = mlua::LightUserData((queue as *const SharedQueue).cast_mut().cast());
    addresses.raw_set(handle, Value::LightUserData(address))
}

/// A weak-keyed table for [`note_handle`].
pub(super) fn addresses_table(lua: &Lua) -> mlua::Result<Table> {
    let table = lua.create_table()?;
    let meta = lua.create_table()?;
    meta.raw_set("__mode", "k")?;
    table.set_metatable(Some(meta))?;
    Ok(table)
}

/// The raw `P.pop(self)`: the front value, or the `mlua` primitive's answer.
///
/// # Safety
/// Called by Luau only, with the upvalues [`pop_function`] set.
unsafe extern "C-unwind" fn raw_pop(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: as documented; the handle stays in slot 1, holding its queue, for the whole call.
    unsafe {
        let context = &*ffi::lua_touserdata(state, ffi::lua_upvalueindex(1)).cast::<RawPop>();
        if ffi::lua_gettop(state) != 1
            || ffi::lua_type(state, 1) != ffi::LUA_TUSERDATA
            || ffi::lua_checkstack(state, 2) == 0
        {
            return call_slow(state);
        }
        ffi::lua_pushvalue(state, 1);
        ffi::lua_rawget(state, ffi::lua_upvalueindex(ADDRESSES));
        let queue = ffi::lua_tolightuserdata(state, -1).cast::<SharedQueue>();
        ffi::lua_settop(state, 1);
        if queue.is_null() {
            return call_slow(state);
        }
        let taken = catch_unwind(AssertUnwindSafe(|| {
            // A value a dead pop of this VM holds goes back first: the primitive sweeps.
            let sweep = context
                .poppers
                .upgrade()
                .is_some_and(|p| !p.parked.borrow().is_empty());
            if sweep {
                return false;
            }
            match (*queue).try_pop() {
                Ok(Some(value)) => {
                    *context.stash.get() = Some(value);
                    true
                }
                _ => false,
            }
        }));
        if !matches!(taken, Ok(true)) {
            return call_slow(state);
        }
        let stash = context.stash.get();
        match &*stash {
            Some(value) if push_scalar(state, value) => *stash = None,
            Some(Message::String(s)) => {
                ffi::lua_pushlstring(state, s.as_ptr().cast(), s.len());
                *stash = None;
            }
            _ => {
                ffi::lua_pushvalue(state, ffi::lua_upvalueindex(BUILD));
                ffi::lua_call(state, 0, 1);
            }
        }
        1
    }
}
