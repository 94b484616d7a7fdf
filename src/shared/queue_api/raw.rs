//! Queue handles as userdata of Skein's own layout, and `P.pop` and `q:push` as raw C
//! functions: a value taken from the queue's front or put at its back without `mlua`'s callback
//! machinery, which was most of what a ready `q:pop()` or a `q:push(v)` with room cost.
//!
//! A handle is a Luau userdata tagged [`TAG`] whose bytes are an `Option<QueueHandle>` (`None`
//! only between the allocation and the write that fills it), with a metatable of its own
//! (`mod.rs` makes it) and the tag's destructor, which drops the handle when the collector frees
//! the userdata. A value is a handle when `lua_touserdatatagged` finds the tag.
//!
//! Every call the raw `pop` does not take (anything but a handle, an empty, closed or ended
//! queue, a VM with parked pops to sweep first) is handed whole to the `mlua` primitive in
//! upvalue 2, before anything was taken, so the second try meets the same queue. The raw `push`
//! does the same with every call whose push was refused or whose value the raw reader does not
//! read (a userdata, a value past the bounds): the queue refused it, so nothing changed, and the
//! `mlua` method raises the refusal with its text.
//!
//! # Safety
//!
//! As in `vm/promise_handle.rs`, no Rust value that needs dropping is alive across a Luau call
//! that can raise. The value taken is parked in [`RawPop::stash`], not on the Rust stack, while
//! it is pushed: a scalar is pushed with no allocation, a string with `lua_pushlstring` (which may
//! raise; the stash keeps the bytes until the next pop replaces them), and anything else by
//! calling the `mlua` function in upvalue 3, which takes the value out of the stash and builds
//! it inside `mlua`'s own protection. A value whose push fails for want of memory is lost, as it
//! is when `mlua` pushes a callback's answer.

use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::rc::{Rc, Weak};

use mlua::{ffi, Function, Lua, Table, Value};

use super::{Poppers, QueueHandle};
use crate::shared::queue::SharedQueue;
use crate::shared::userdata_tag;
use crate::sync::Arc;
use crate::value::read::Reader;
use crate::value::write::push_scalar;
use crate::value::{Limits, Message};
use crate::vm::promise_handle::call_slow;

/// The userdata tag of a queue handle.
const TAG: c_int = userdata_tag::SHARED_QUEUE;

/// What a handle's userdata holds.
type Slot = Option<QueueHandle>;

// Luau aligns a userdata's bytes for any scalar, at least 8.
const _: () = assert!(std::mem::align_of::<Slot>() <= 8);

/// Gives the VM the tag's destructor. Runs once per VM, before the first handle is made.
pub(super) fn install(lua: &Lua) -> mlua::Result<()> {
    // SAFETY: sets the destructor of a tag no other code uses; it only drops the slot.
    unsafe {
        lua.exec_raw::<()>((), |state| {
            ffi::lua_setuserdatadtor(state, TAG, Some(drop_handle));
        })
    }
}

/// The tag's destructor: drops the handle as the collector frees its userdata.
unsafe extern "C" fn drop_handle(_: *mut ffi::lua_State, data: *mut c_void) {
    // A panic must not cross into Luau; a handle's drop releases only Rust state.
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: Luau calls this once, for a userdata of the tag, whose bytes are a `Slot`.
        unsafe { std::ptr::drop_in_place(data.cast::<Slot>()) }
    }));
}

/// The handle at `idx`, or null when the value there is not one.
///
/// # Safety
/// `idx` is a valid index of `state`; the pointer lives while the slot holds the userdata.
pub(super) unsafe fn held(state: *mut ffi::lua_State, idx: c_int) -> *const QueueHandle {
    // SAFETY: the caller's contract; a userdata of the tag holds a `Slot`.
    unsafe {
        let slot = ffi::lua_touserdatatagged(state, idx, TAG).cast::<Slot>();
        match slot.as_ref() {
            Some(Some(handle)) => handle,
            _ => std::ptr::null(),
        }
    }
}

/// The queue of the handle `value` is; `None` for any other value.
pub(super) fn queue_in(lua: &Lua, value: &Value) -> Option<Arc<SharedQueue>> {
    if !matches!(value, Value::UserData(_)) {
        return None;
    }
    let mut found = None;
    // SAFETY: the value is the one argument; the closure only reads it.
    let read = unsafe {
        lua.exec_raw::<()>(value, |state| {
            found = held(state, -1).as_ref().map(|h| h.0.clone());
        })
    };
    read.ok().and(found)
}

/// Makes a handle's userdata with `meta` as its metatable, inside a protected call: a memory
/// error is an `Err`, and the handle is dropped with it.
pub(super) fn new_handle(lua: &Lua, handle: QueueHandle, meta: Table) -> mlua::Result<Value> {
    let mut slot = Some(handle);
    // SAFETY: the metatable is the one argument; the allocation may raise, to exec_raw's
    // protected call, and the handle stays in `slot`, in this frame, until the userdata exists
    // to take it.
    unsafe {
        lua.exec_raw::<Value>(meta, |state| {
            let data = ffi::lua_newuserdatatagged(state, size_of::<Slot>(), TAG);
            data.cast::<Slot>().write(slot.take());
            ffi::lua_insert(state, -2);
            ffi::lua_setmetatable(state, -2);
        })
    }
}

/// One VM's state for the raw `P.pop`, reached through its first upvalue.
pub(super) struct RawPop {
    poppers: Weak<Poppers>,
    /// The value being pushed: see the module's safety section.
    stash: UnsafeCell<Option<Message>>,
}

/// Upvalue 3: the `mlua` function that pushes the stashed value.
const BUILD: c_int = 3;

/// The raw `P.pop`, with `slow` (the `mlua` primitive) behind it.
pub(super) fn pop_function(
    lua: &Lua,
    poppers: Weak<Poppers>,
    slow: Function,
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
    // SAFETY: pushes the upvalues and the closure inside exec_raw's protected call; the context
    // lives as long as the raw function, whose upvalue 3 (`build`) holds it.
    unsafe {
        lua.exec_raw::<Function>((slow, build), |state| {
            ffi::lua_pushlightuserdata(state, pointer);
            ffi::lua_insert(state, 1);
            ffi::lua_pushcclosurek(state, raw_pop, c"pop".as_ptr(), 3, None);
        })
    }
}

/// The raw `P.pop(self)`: the front value, or the `mlua` primitive's answer.
///
/// # Safety
/// Called by Luau only, with the upvalues [`pop_function`] set.
unsafe extern "C-unwind" fn raw_pop(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: as documented; the handle stays in slot 1, holding its queue, for the whole call.
    unsafe {
        let context = &*ffi::lua_touserdata(state, ffi::lua_upvalueindex(1)).cast::<RawPop>();
        let handle = held(state, 1);
        if ffi::lua_gettop(state) != 1 || handle.is_null() || ffi::lua_checkstack(state, 1) == 0 {
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
            match (*handle).0.try_pop() {
                Ok(Some(value)) => {
                    *context.stash.get() = Some(value);
                    true
                }
                _ => false,
            }
        }));
        // A panic's payload is dropped here, before any Luau call.
        if !taken.unwrap_or(false) {
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

/// The raw `q:push(value)`, with `slow` (the `mlua` method) behind it.
pub(super) fn push_function(lua: &Lua, slow: Function) -> mlua::Result<Function> {
    // SAFETY: pushes the upvalues (nothing, and the slow path) and the closure inside
    // exec_raw's protected call.
    unsafe {
        lua.exec_raw::<Function>(slow, |state| {
            ffi::lua_pushnil(state);
            ffi::lua_insert(state, 1);
            ffi::lua_pushcclosurek(state, raw_push, c"push".as_ptr(), 2, None);
        })
    }
}

/// The raw `q:push(value)`: the value read off the stack and queued, or the call handed to the
/// `mlua` method.
///
/// # Safety
/// Called by Luau only, with the upvalues [`push_function`] set.
unsafe extern "C-unwind" fn raw_push(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: as documented; the handle stays in slot 1, holding its queue, for the whole call.
    unsafe {
        let handle = held(state, 1);
        if ffi::lua_gettop(state) != 2 || handle.is_null() {
            return call_slow(state);
        }
        // A refused push hands its value back inside the error, dropped here with it, before
        // any Luau call.
        let pushed = catch_unwind(AssertUnwindSafe(|| {
            match Reader::on_state(state, Limits::MAX_MESSAGE_BYTES).read_at(2) {
                Ok(value) => (*handle).0.push(value).is_ok(),
                Err(_) => false,
            }
        }));
        if !pushed.unwrap_or(false) {
            return call_slow(state);
        }
        0
    }
}
