//! Shared-table handles as userdata of Skein's own layout, and raw C functions for the hot
//! operations on them: `t.k`, `t.k = v`, `#t`, `jobs.shared.add` and `jobs.shared.atomic`.
//!
//! A handle is a Luau userdata tagged [`TAG`] whose bytes are an `Option<Handle>` (`None` only
//! between the allocation and the write that fills it). The VM keeps the metatable for the tag
//! (`lua_setuserdatametatable`), so a new handle gets it as it is made, and a destructor for the
//! tag drops the `Handle` when the collector frees the userdata. A value is a handle when
//! `lua_touserdatatagged` finds the tag: no metatable lookup, no type map. The metatable is
//! read-only and protected (`getmetatable(t)` is `false`), so a script can neither change it nor
//! give it to a value of its own; `newproxy` makes untagged userdata, which no function here
//! takes for a handle.
//!
//! Each raw function reads its arguments straight off the stack, does the common call and
//! pushes the answer, without `mlua`'s callback machinery. Anything else (a refusal of any kind,
//! an argument the raw path does not read) is handed whole to the `mlua` function in upvalue 2,
//! which answers it or raises its refusal with the text it always had. The raw functions for
//! `t.k = v`, `#t` and `add` change nothing when they hand over, so the second try meets the
//! same state. `atomic` hands over before its function runs, or where a retry would run it
//! again anyway.
//!
//! # Safety
//!
//! The rule of `vm/promise_handle.rs` holds: no Rust value that needs dropping is alive across a
//! Luau call that can raise. A raw function computes its answer inside `catch_unwind`, calling
//! no Luau function that can raise there, and parks it in the VM's [`RawTables::stash`] rather
//! than on the Rust stack; then, with every Rust value dropped, it pushes the answer from the
//! stash (a push that allocates may raise: the stash still owns what it was copying, and the
//! next call replaces it). `atomic` runs the script's function inside `lua_pcall`, which catches
//! every error the function raises.

use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::rc::Rc;

use bytes::Bytes;
use mlua::{ffi, AnyUserData, Function, Lua, MultiValue, Value};

use super::args::{KeyArg, ValueArg};
use super::{atomic_yielded, refused_by, Handle, Out};
use crate::shared::table::error::{SharedTableError, SharedTableErrorKind};
use crate::shared::table::key::{Amount, Entry};
use crate::shared::table::node::entry_message;
use crate::shared::userdata_tag;
use crate::value::read::Reader;
use crate::value::write::push_scalar;
use crate::value::{Limits, Message};
use crate::vm::promise_handle::call_slow;

/// The userdata tag of a shared-table handle.
const TAG: c_int = userdata_tag::SHARED_TABLE;

/// What a handle's userdata holds.
type Slot = Option<Handle>;

// Luau aligns a userdata's bytes for any scalar, at least 8.
const _: () = assert!(std::mem::align_of::<Slot>() <= 8);

/// One VM's state for the raw functions, reached through their first upvalue.
pub(super) struct RawTables {
    /// The answer a raw function is pushing: see the module's safety section.
    stash: UnsafeCell<Option<Out>>,
}

/// The `mlua` functions the raw ones hand their other calls to.
pub(super) struct SlowPaths {
    pub(super) index: Function,
    pub(super) newindex: Function,
    pub(super) len: Function,
    pub(super) add: Function,
    pub(super) atomic: Function,
    /// `__iter`, `__tostring` and `__eq`: no raw form.
    pub(super) iter: Function,
    pub(super) tostring: Function,
    pub(super) eq: Function,
    /// Raises its one argument as a runtime error: how `atomic` raises a refusal of its own
    /// after the script's function ran (so it can't hand the call over).
    pub(super) raise: Function,
}

/// The raw `jobs.shared.add` and `jobs.shared.atomic`.
pub(super) struct RawFunctions {
    pub(super) add: Function,
    pub(super) atomic: Function,
}

/// Gives the VM the handle metatable and destructor, and makes the raw functions. Runs before
/// the first handle is made; a second run (the first failed partway, out of memory) keeps the
/// VM's context and the tag's metatable from the first, so no function already made is left
/// pointing at a context that was dropped.
pub(super) fn install(lua: &Lua, slow: SlowPaths) -> mlua::Result<RawFunctions> {
    let context = match lua.app_data_ref::<Rc<RawTables>>() {
        Some(context) => context.clone(),
        None => {
            let context = Rc::new(RawTables {
                stash: UnsafeCell::new(None),
            });
            lua.set_app_data(context.clone());
            context
        }
    };
    let pointer = Rc::as_ptr(&context).cast_mut().cast::<c_void>();
    let raw = |f: ffi::lua_CFunction, name: &'static CStr, upvalues: Vec<Function>| {
        // SAFETY: pushes the upvalues and the closure inside exec_raw's protected call; the
        // context lives as long as the VM (its app data holds it).
        unsafe {
            lua.exec_raw::<Function>(
                MultiValue::from_iter(upvalues.into_iter().map(Value::Function)),
                |state| {
                    let n = ffi::lua_gettop(state);
                    ffi::lua_pushlightuserdata(state, pointer);
                    ffi::lua_insert(state, 1);
                    ffi::lua_pushcclosurek(state, f, name.as_ptr(), n + 1, None);
                },
            )
        }
    };
    let meta = lua.create_table()?;
    meta.raw_set("__type", "SharedTable")?;
    meta.raw_set("__metatable", false)?;
    meta.raw_set("__index", raw(raw_index, c"__index", vec![slow.index])?)?;
    meta.raw_set(
        "__newindex",
        raw(raw_newindex, c"__newindex", vec![slow.newindex])?,
    )?;
    meta.raw_set("__len", raw(raw_len, c"__len", vec![slow.len])?)?;
    meta.raw_set("__iter", slow.iter)?;
    meta.raw_set("__tostring", slow.tostring)?;
    meta.raw_set("__eq", slow.eq)?;
    meta.set_readonly(true);
    // SAFETY: the metatable is the one argument; the tag's metatable is set once per VM (only
    // while it has none), and the destructor only drops the slot. The maker is a plain C function
    // kept in the registry under `MAKER`'s address.
    unsafe {
        lua.exec_raw::<()>(&meta, |state| {
            ffi::lua_getuserdatametatable(state, TAG);
            let unset = ffi::lua_isnil(state, -1) != 0;
            ffi::lua_settop(state, -2);
            if unset {
                ffi::lua_setuserdatametatable(state, TAG);
            }
            ffi::lua_setuserdatadtor(state, TAG, Some(drop_handle));
            ffi::lua_pushcclosurek(state, make_handle, c"SharedTable".as_ptr(), 0, None);
            ffi::lua_rawsetp(state, ffi::LUA_REGISTRYINDEX, (&raw const MAKER).cast());
        })?;
    }
    Ok(RawFunctions {
        add: raw(raw_add, c"add", vec![slow.add])?,
        atomic: raw(
            raw_atomic,
            c"atomic",
            vec![slow.atomic, slow.raise, handler(lua)?],
        )?,
    })
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
pub(super) unsafe fn held(state: *mut ffi::lua_State, idx: c_int) -> *const Handle {
    // SAFETY: the caller's contract; a userdata of the tag holds a `Slot`.
    unsafe {
        let slot = ffi::lua_touserdatatagged(state, idx, TAG).cast::<Slot>();
        match slot.as_ref() {
            Some(Some(handle)) => handle,
            _ => std::ptr::null(),
        }
    }
}

/// The handle `value` is, cloned; `None` for any other value.
pub(super) fn handle_in(lua: &Lua, value: &Value) -> Option<Handle> {
    if !matches!(value, Value::UserData(_)) {
        return None;
    }
    let mut found = None;
    // SAFETY: the value is the one argument; the closure only reads it.
    let read = unsafe {
        lua.exec_raw::<()>(value, |state| {
            found = held(state, -1).as_ref().cloned();
        })
    };
    read.ok().and(found)
}

/// Makes a handle's userdata, inside a protected call: a memory error is an `Err`, and the
/// handle is dropped with it.
pub(super) fn new_handle(lua: &Lua, handle: Handle) -> mlua::Result<AnyUserData> {
    let mut slot = Some(handle);
    // SAFETY: the allocation may raise, to exec_raw's protected call; the handle stays in
    // `slot`, in this frame, until the userdata exists to take it.
    unsafe {
        lua.exec_raw::<AnyUserData>((), |state| {
            let data = ffi::lua_newuserdatataggedwithmetatable(state, size_of::<Slot>(), TAG);
            data.cast::<Slot>().write(slot.take());
        })
    }
}

/// The registry key (its address) of [`make_handle`].
static MAKER: u8 = 0;

/// Pushes a new handle's userdata onto `state`, made inside a protected call: for `mlua`'s push
/// of a callback's answer, where a raise must not unwind through the callback's frames.
///
/// # Safety
/// `state` is a state of a VM [`install`] ran in, with `mlua`'s one free slot.
pub(super) unsafe fn push_new_handle(
    state: *mut ffi::lua_State,
    handle: Handle,
) -> mlua::Result<()> {
    let mut slot = Some(handle);
    // SAFETY: the caller's contract; `make_handle` takes the handle out of `slot`, which lives
    // in this frame until `lua_pcall` returns, and leaves the userdata as its one result.
    unsafe {
        if ffi::lua_checkstack(state, 2) == 0 {
            return Err(mlua::Error::StackError);
        }
        ffi::lua_rawgetp(state, ffi::LUA_REGISTRYINDEX, (&raw const MAKER).cast());
        ffi::lua_pushlightuserdata(state, (&raw mut slot).cast());
        if ffi::lua_pcall(state, 1, 1, 0) != ffi::LUA_OK {
            ffi::lua_settop(state, -2);
            return Err(mlua::Error::MemoryError(
                "not enough memory to make a shared table's handle".into(),
            ));
        }
    }
    Ok(())
}

/// The registry's maker: takes the handle out of the `Slot` its light userdata argument points
/// at and answers a new userdata holding it.
///
/// # Safety
/// Called only by [`push_new_handle`], through `lua_pcall`.
unsafe extern "C-unwind" fn make_handle(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: as documented; the allocation may raise, to the caller's protected call, while the
    // handle is still in the caller's slot.
    unsafe {
        let slot = ffi::lua_touserdata(state, 1).cast::<Slot>();
        let data = ffi::lua_newuserdatataggedwithmetatable(state, size_of::<Slot>(), TAG);
        data.cast::<Slot>().write((*slot).take());
    }
    1
}

/// The VM's [`RawTables`], from a raw function's first upvalue.
///
/// # Safety
/// Called from a function [`install`] made.
unsafe fn context<'a>(state: *mut ffi::lua_State) -> &'a RawTables {
    // SAFETY: the caller's contract; the context outlives the VM's functions.
    unsafe { &*ffi::lua_touserdata(state, ffi::lua_upvalueindex(1)).cast::<RawTables>() }
}

impl RawTables {
    /// Parks `out` to be pushed.
    fn park(&self, out: Out) {
        // SAFETY: one VM runs on one thread, and no reference into the stash outlives a call.
        unsafe { *self.stash.get() = Some(out) }
    }

    /// Pushes the parked answer (one value) and empties the stash. A push that allocates may
    /// raise; the stash keeps what it was copying until the next answer replaces it.
    ///
    /// # Safety
    /// `state` has a free slot and no Rust value that needs dropping is alive in the caller.
    unsafe fn push_parked(&self, state: *mut ffi::lua_State) {
        let stash = self.stash.get();
        // SAFETY: the caller's contract; pointers into the stash are not kept across the pushes.
        unsafe {
            match &*stash {
                Some(Out::Data(m)) if push_scalar(state, m) => {}
                Some(Out::Data(Message::String(s))) => {
                    ffi::lua_pushlstring(state, s.as_ptr().cast(), s.len());
                }
                Some(Out::Data(Message::Buffer(b))) => {
                    let data = ffi::lua_newbuffer(state, b.len());
                    if !b.is_empty() {
                        std::ptr::copy_nonoverlapping(b.as_ptr(), data.cast::<u8>(), b.len());
                    }
                }
                Some(Out::Handle(_)) => {
                    let data =
                        ffi::lua_newuserdatataggedwithmetatable(state, size_of::<Slot>(), TAG);
                    let handle = match (*stash).take() {
                        Some(Out::Handle(h)) => Some(h),
                        _ => None,
                    };
                    data.cast::<Slot>().write(handle);
                }
                // A table or a resource is never a shared table's entry.
                Some(Out::Data(_)) | None => ffi::lua_pushnil(state),
            }
            *stash = None;
        }
    }
}

/// A value for `t.k = v` that the raw path stores itself.
enum Stored {
    Scalar(Message),
    /// A string's bytes where Luau holds them (argument 3).
    Str(*const u8, usize),
}

/// Reads argument `idx` as a value the raw path stores, or `None` for one it hands over.
///
/// # Safety
/// `idx` is a valid index of `state`.
unsafe fn stored_at(state: *mut ffi::lua_State, idx: c_int) -> Option<Stored> {
    // SAFETY: the caller's contract; these calls only read the slot.
    unsafe {
        Some(match ffi::lua_type(state, idx) {
            ffi::LUA_TNIL => Stored::Scalar(Message::Nil),
            ffi::LUA_TBOOLEAN => {
                Stored::Scalar(Message::Boolean(ffi::lua_toboolean(state, idx) != 0))
            }
            ffi::LUA_TNUMBER => Stored::Scalar(Message::Number(ffi::lua_tonumber(state, idx))),
            ffi::LUA_TINTEGER => Stored::Scalar(Message::Integer(ffi::lua_tointeger64(
                state,
                idx,
                std::ptr::null_mut(),
            ))),
            ffi::LUA_TSTRING => {
                let mut len = 0usize;
                let ptr = ffi::lua_tolstring(state, idx, &mut len);
                // The reader's weight of a string: over the bound, it refuses it.
                if len.saturating_add(Limits::NODE_WEIGHT) > Limits::MAX_MESSAGE_BYTES {
                    return None;
                }
                Stored::Str(ptr.cast(), len)
            }
            _ => return None,
        })
    }
}

/// `t.k`.
///
/// # Safety
/// Called by Luau only, as the handle metatable's `__index`.
unsafe extern "C-unwind" fn raw_index(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: as documented; the handle and key live in their slots for the whole call.
    unsafe {
        let context = context(state);
        let handle = held(state, 1);
        if handle.is_null() {
            return call_slow(state);
        }
        let key = KeyArg::from_raw(state, 2);
        let found = catch_unwind(AssertUnwindSafe(|| match (*handle).get(&key) {
            Ok(out) => {
                context.park(out);
                true
            }
            Err(_) => false,
        }));
        // A panic's payload is dropped here, before any Luau call.
        if !found.unwrap_or(false) {
            return call_slow(state);
        }
        context.push_parked(state);
        1
    }
}

/// `t.k = v`.
///
/// # Safety
/// Called by Luau only, as the handle metatable's `__newindex`.
unsafe extern "C-unwind" fn raw_newindex(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: as documented; the handle, key and value live in their slots for the whole call.
    unsafe {
        let handle = held(state, 1);
        let value = stored_at(state, 3);
        let (false, Some(value)) = (handle.is_null(), value) else {
            return call_slow(state);
        };
        let key = KeyArg::from_raw(state, 2);
        let written = catch_unwind(AssertUnwindSafe(|| {
            let value = ValueArg::Data(match value {
                Stored::Scalar(m) => m,
                Stored::Str(ptr, len) => {
                    Message::String(Bytes::copy_from_slice(std::slice::from_raw_parts(ptr, len)))
                }
            });
            (*handle).set(&key, &value).is_ok()
        }));
        if !written.unwrap_or(false) {
            return call_slow(state);
        }
        0
    }
}

/// `#t`.
///
/// # Safety
/// Called by Luau only, as the handle metatable's `__len`.
unsafe extern "C-unwind" fn raw_len(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: as documented.
    unsafe {
        let handle = held(state, 1);
        if handle.is_null() {
            return call_slow(state);
        }
        let border = catch_unwind(AssertUnwindSafe(|| {
            (*handle).with_node(|node| node.border as f64).ok()
        }));
        let Some(border) = border.ok().flatten() else {
            return call_slow(state);
        };
        ffi::lua_pushnumber(state, border);
        1
    }
}

/// `jobs.shared.add(t, key, amount)` with a number or integer amount.
///
/// # Safety
/// Called by Luau only, as the function [`install`] made.
unsafe extern "C-unwind" fn raw_add(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: as documented; the arguments live in their slots for the whole call.
    unsafe {
        let context = context(state);
        let handle = held(state, 1);
        let amount = match ffi::lua_type(state, 3) {
            ffi::LUA_TNUMBER => Message::Number(ffi::lua_tonumber(state, 3)),
            ffi::LUA_TINTEGER => {
                Message::Integer(ffi::lua_tointeger64(state, 3, std::ptr::null_mut()))
            }
            _ => return call_slow(state),
        };
        if handle.is_null() || ffi::lua_gettop(state) != 3 {
            return call_slow(state);
        }
        let key = KeyArg::from_raw(state, 2);
        let summed = catch_unwind(AssertUnwindSafe(|| {
            let table = (*handle).live().ok()?;
            let key = key.key_in(String::new).ok()?;
            let amount = Amount::of(&amount).ok()?;
            let sum = table.add_entry(&key, amount).ok()?;
            context.park(Out::Data(entry_message(&sum)));
            Some(())
        }));
        if summed.ok().flatten().is_none() {
            return call_slow(state);
        }
        context.push_parked(state);
        1
    }
}

/// How a raw `atomic` ended, once every Rust value is dropped.
enum Ending {
    /// The answer is parked.
    Stored,
    /// Hand the call over: the script's function has not run.
    Slow,
    /// The script's function raised an `mlua` error (a userdata): it is on top of the stack, to
    /// raise again as it is.
    Raised,
    /// The script's function raised anything else: its text with the traceback of where it was
    /// raised is on top, to raise through upvalue 3 as a runtime error (or, after `LUA_ERRMEM`,
    /// a memory error), as `mlua` raises an error its call of a function met.
    RaisedText { memory: bool },
    /// A refusal of `atomic`'s own, parked as its text, to raise through upvalue 3.
    Refused,
}

/// `jobs.shared.atomic(t, key, fn)`. The script's function is called with `lua_pcall` and
/// [`error_text`] as its message handler, so every error it raises is caught, made what the
/// `mlua` path makes of it (its text and the traceback of where it was raised), and raised once
/// the Rust frames are done. It is
/// called with the current value only while that is a scalar (a string or a table would need an
/// allocation outside the protected call): meeting another before the first call hands the call
/// over; meeting one on a retry (another thread changed the key's type meanwhile) stops there
/// and hands over too, which runs the function again on the newer value, as a retry does.
///
/// # Safety
/// Called by Luau only, as the function [`install`] made.
unsafe extern "C-unwind" fn raw_atomic(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: as documented; the arguments live in their slots for the whole call. Stack room
    // for the call and the result reader is reserved before any Rust value exists.
    unsafe {
        let context = context(state);
        let handle = held(state, 1);
        if handle.is_null()
            || ffi::lua_gettop(state) != 3
            || ffi::lua_type(state, 3) != ffi::LUA_TFUNCTION
            || ffi::lua_checkstack(state, Reader::STACK_NEEDED + 3) == 0
        {
            return call_slow(state);
        }
        let key = KeyArg::from_raw(state, 2);
        ffi::lua_pushvalue(state, ffi::lua_upvalueindex(4));
        let ending = catch_unwind(AssertUnwindSafe(|| {
            run_atomic(state, context, &*handle, &key)
        }))
        .unwrap_or(Ending::Slow);
        match ending {
            Ending::Stored => {
                context.push_parked(state);
                1
            }
            Ending::Slow => {
                ffi::lua_settop(state, 3);
                call_slow(state)
            }
            Ending::Raised => ffi::lua_error(state),
            Ending::RaisedText { memory } => {
                ffi::lua_pushvalue(state, ffi::lua_upvalueindex(3));
                ffi::lua_insert(state, -2);
                ffi::lua_pushboolean(state, c_int::from(memory));
                ffi::lua_call(state, 2, 0);
                0
            }
            Ending::Refused => {
                ffi::lua_pushvalue(state, ffi::lua_upvalueindex(3));
                context.push_parked(state);
                ffi::lua_call(state, 1, 0);
                // The raiser always raises; were it to return, the call answers nothing.
                0
            }
        }
    }
}

/// The Rust part of [`raw_atomic`]: runs inside `catch_unwind`, raising nothing.
///
/// # Safety
/// As [`raw_atomic`], with its stack room reserved.
unsafe fn run_atomic(
    state: *mut ffi::lua_State,
    context: &RawTables,
    handle: &Handle,
    key: &KeyArg,
) -> Ending {
    let (Ok(table), Ok(key)) = (handle.live(), key.key_in(String::new)) else {
        return Ending::Slow;
    };
    // The message handler sits at `top`; the function and its argument go above it.
    let top = ffi_top(state);
    let mut raised = None;
    let mut handed_over = false;
    let at = || handle.key_location(&key.clone().into_owned());
    let result = table.atomic_entry(&key, &mut |current| {
        let current = match &current {
            None => Message::Nil,
            Some(
                entry @ (Entry::Boolean(_)
                | Entry::Integer(_)
                | Entry::Number(_)
                | Entry::Vector(_)),
            ) => entry_message(entry),
            Some(_) => {
                handed_over = true;
                return Err(handover());
            }
        };
        // SAFETY: room for the function and its argument was reserved; neither push
        // allocates, and `lua_pcall` catches whatever the function raises.
        let status = unsafe {
            ffi::lua_settop(state, top);
            ffi::lua_pushvalue(state, 3);
            push_scalar(state, &current);
            ffi::lua_pcall(state, 1, 1, top)
        };
        if status != ffi::LUA_OK {
            raised = Some(status);
            return Err(handover());
        }
        // SAFETY: the result is on top; the reader needs the room reserved at the start.
        let next = unsafe { result_at(state, top + 1) };
        // SAFETY: pops the result.
        unsafe { ffi::lua_settop(state, top) };
        next.entry(at)
    });
    match result {
        Ok(stored) => {
            context.park(handle.out(key.as_ref(), stored.as_ref()));
            Ending::Stored
        }
        // A yield inside the function: refused with `atomic`'s own text, as the slow path
        // refuses it.
        // SAFETY: the error is on top, where `lua_pcall` left it.
        Err(_) if raised.is_some() && unsafe { yielded(state) } => {
            // SAFETY: drops the error.
            unsafe { ffi::lua_settop(state, top) };
            context.park(Out::Data(Message::String(Bytes::from(atomic_yielded(
                &at(),
            )))));
            Ending::Refused
        }
        // Any other error stays on top, to raise again.
        Err(_) if raised == Some(ffi::LUA_ERRMEM) => Ending::RaisedText { memory: true },
        // SAFETY: the error is on top.
        Err(_) if raised.is_some() && unsafe { ffi::lua_type(state, -1) } == ffi::LUA_TUSERDATA => {
            Ending::Raised
        }
        Err(_) if raised.is_some() => Ending::RaisedText { memory: false },
        Err(_) if handed_over => Ending::Slow,
        Err(e) => {
            let text = match refused_by("jobs.shared.atomic", e) {
                mlua::Error::RuntimeError(text) => text,
                other => other.to_string(),
            };
            context.park(Out::Data(Message::String(Bytes::from(text))));
            Ending::Refused
        }
    }
}

/// [`error_text`] as a function, upvalue 4 of the raw `atomic`.
fn handler(lua: &Lua) -> mlua::Result<Function> {
    // SAFETY: pushes one C function inside exec_raw's protected call.
    unsafe {
        lua.exec_raw::<Function>((), |state| {
            ffi::lua_pushcclosurek(state, error_text, std::ptr::null(), 0, None);
        })
    }
}

/// The message handler of `atomic`'s call of the script's function, doing what `mlua`'s does
/// for its calls: a userdata error (an `mlua` error from a nested callback) stays as it is; any
/// other value becomes its text followed by the traceback of where it was raised. Luau's
/// out-of-memory error is left alone, since making text then would need memory.
///
/// # Safety
/// Called by Luau only, as a message handler, with the error on top.
unsafe extern "C-unwind" fn error_text(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: as documented; the text is made only after the stack has room for it.
    unsafe {
        if ffi::lua_type(state, -1) == ffi::LUA_TUSERDATA || out_of_memory(state) {
            return 1;
        }
        if ffi::lua_checkstack(state, 2) == 0 {
            return 1;
        }
        let text = ffi::luaL_tolstring(state, -1, std::ptr::null_mut());
        if ffi::lua_checkstack(state, ffi::LUA_TRACEBACK_STACK) != 0 {
            ffi::luaL_traceback(state, state, text, 0);
            ffi::lua_remove(state, -2);
        }
    }
    1
}

/// The string on top, read in place (nothing is converted), or `None` for any other value. The
/// bytes live while the value stays on the stack.
///
/// # Safety
/// `state` has a value on top.
unsafe fn string_on_top<'a>(state: *mut ffi::lua_State) -> Option<&'a [u8]> {
    // SAFETY: the caller's contract; Luau does not move a string while a slot holds it.
    unsafe {
        if ffi::lua_type(state, -1) != ffi::LUA_TSTRING {
            return None;
        }
        let mut len = 0usize;
        let text = ffi::lua_tolstring(state, -1, &mut len);
        Some(std::slice::from_raw_parts(text.cast::<u8>(), len))
    }
}

/// Whether the value on top is Luau's out-of-memory error, its bare text.
///
/// # Safety
/// `state` has a value on top.
unsafe fn out_of_memory(state: *mut ffi::lua_State) -> bool {
    // SAFETY: the caller's contract.
    unsafe { string_on_top(state) == Some(b"not enough memory".as_slice()) }
}

/// Whether the error on top is Luau's refusal of a yield across the protected call.
///
/// # Safety
/// `state` has a value on top.
unsafe fn yielded(state: *mut ffi::lua_State) -> bool {
    // SAFETY: the caller's contract.
    unsafe { string_on_top(state) }
        .is_some_and(|text| text.windows(YIELD_ACROSS.len()).any(|w| w == YIELD_ACROSS))
}

/// What Luau says when a function called through a C call yields.
const YIELD_ACROSS: &[u8] = b"attempt to yield across";

/// The marker error that stops `atomic_entry` without a write when the raw path hands over or
/// the script's function raised.
fn handover() -> SharedTableError {
    SharedTableError::new(SharedTableErrorKind::Function, String::new())
}

fn ffi_top(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: reads the top of a live state.
    unsafe { ffi::lua_gettop(state) }
}

/// The script function's result at `idx`, read as `t.k = v` reads a value.
///
/// # Safety
/// `idx` is a valid index of `state`, with the reader's stack room reserved.
unsafe fn result_at(state: *mut ffi::lua_State, idx: c_int) -> ValueArg {
    // SAFETY: the caller's contract.
    unsafe {
        if let Some(stored) = stored_at(state, idx) {
            return ValueArg::Data(match stored {
                Stored::Scalar(m) => m,
                Stored::Str(ptr, len) => {
                    Message::String(Bytes::copy_from_slice(std::slice::from_raw_parts(ptr, len)))
                }
            });
        }
        if let Some(h) = held(state, idx).as_ref() {
            return ValueArg::Handle(h.clone());
        }
        match Reader::on_state(state, Limits::MAX_MESSAGE_BYTES).read_at(idx) {
            Ok(m) => ValueArg::Data(m),
            Err(r) => ValueArg::Refused(r),
        }
    }
}

/// The function upvalue 3 of the raw `atomic` holds: raises its argument as a runtime error,
/// the form every refusal of `atomic` takes.
pub(super) fn raiser(lua: &Lua) -> mlua::Result<Function> {
    lua.create_function(
        |_, (text, memory): (mlua::LuaString, Option<bool>)| -> mlua::Result<()> {
            let text = text.to_string_lossy();
            Err(if memory == Some(true) {
                mlua::Error::MemoryError(text)
            } else {
                mlua::Error::runtime(text)
            })
        },
    )
}
