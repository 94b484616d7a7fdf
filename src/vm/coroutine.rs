//! A task's coroutine resumed below mlua's `Thread` API: one `lua_resume` on the raw state, the
//! status read from its return code, the stack read and cleared in place. The scheduler resumes
//! every task here, and a pool worker builds a root task's first run straight on the coroutine's
//! stack (`jobs/worker/`), so a job pays no status queries, no stack moves through the calling
//! state and no `Thread::reset`.
//!
//! Only what is cheap and cannot raise happens on the hot path. An error, the one case with
//! work to do, is turned into the same `mlua::Error` that `Thread::resume` makes (a wrapped
//! Rust error, a resumed panic, or the value's text with the coroutine's traceback appended), so
//! every failure text stays as it was.
//!
//! # Why the raw calls here are sound
//! Luau is built here with C++ exceptions (`luau0-src`'s default, which `mlua-sys` keeps): a
//! raise is a `throw`, caught by the nearest `luaD_rawrunprotected` of the *same* thread, and a
//! throw with no catch above it ends the process. So every call on these paths is one of two
//! kinds:
//! - calls that cannot raise: `lua_resume` (it runs the coroutine under its own protection and
//!   answers a status), `lua_status`/`lua_gettop`/`lua_settop`/`lua_type`/`lua_to*` reads,
//!   `lua_rawgeti`/`lua_rawget` of tables (no metamethods, no allocation), scalar pushes, and
//!   `lua_checkstack`/`lua_xmove` for a few slots where the stack has room (a coroutine's stack
//!   never shrinks below `BASIC_STACK_SIZE`, 40 slots);
//! - calls that can raise (allocating a string, a table, a coroutine; `__tostring`), which run
//!   inside a protected call on the state they raise on: mlua's `exec_raw`, or the one C
//!   function per VM [`push_protected`] calls with `lua_pcall`.
//!
//! No Rust value that needs dropping is alive across a call that can raise: a `throw` through
//! Rust frames would run their destructors (the frames are `C-unwind`), and with `longjmp` it
//! would skip them; the rule holds under either build. Rust panics never cross a Luau frame:
//! mlua's callbacks catch them and raise a wrapped panic, which [`raised`] resumes in Rust, where
//! the scheduler's `catch_unwind` contains it as today.

use std::ffi::{c_int, c_void};
use std::ptr;

use mlua::{ffi, Lua, LuaString, RegistryKey, Thread, Value};

use crate::value::{self, write_protected, Message};

/// How a raw resume ended.
pub(crate) enum Resumed {
    /// The coroutine returned this many values, at stack indices `1..=n` of the coroutine.
    Returned(c_int),
    /// It yielded; its stack is cleared.
    Yielded,
    /// It raised (or could not be resumed); the coroutine is dead or untouched.
    Raised(mlua::Error),
}

/// Resumes `thread`, whose stack holds its function (a new coroutine) or nothing (a yielded
/// one) under the `nargs` arguments on top.
///
/// # Safety
/// `thread` belongs to `lua`'s VM and is not running; its stack holds what is said above.
pub(crate) unsafe fn resume(lua: &Lua, thread: &Thread, nargs: c_int) -> Resumed {
    let co = thread.state();
    let from = lua.state();
    // SAFETY: the caller's contract. `lua_resume` runs the coroutine under its own protection
    // and answers a status; it raises nothing to us.
    let status = unsafe { ffi::lua_resume_(co, from, nargs) };
    match status {
        // SAFETY: reading the top of a coroutine that just returned.
        ffi::LUA_OK => Resumed::Returned(unsafe { ffi::lua_gettop(co) }),
        ffi::LUA_YIELD => {
            // What it yielded is not used (a task parks through the scheduler), as mlua's
            // resume cleared it too.
            // SAFETY: shrinking the stack of a suspended coroutine frees nothing and can't raise.
            unsafe { ffi::lua_settop(co, 0) };
            Resumed::Yielded
        }
        status => {
            let err = raised(lua, thread, status);
            // SAFETY: the coroutine is dead; clearing its stack is what mlua's resume did.
            unsafe { ffi::lua_settop(co, 0) };
            Resumed::Raised(err)
        }
    }
}

/// Whether `thread` can be resumed (a new coroutine with its function, or a yielded one), as
/// `Thread::resume` checks before resuming; answers the error it gave otherwise.
pub(crate) fn check_resumable(lua: &Lua, thread: &Thread) -> Result<(), mlua::Error> {
    // SAFETY: `lua_costatus` only reads the two states' fields.
    let status = unsafe { ffi::lua_costatus(lua.state(), thread.state()) };
    if status == ffi::LUA_COSUS {
        Ok(())
    } else {
        Err(mlua::Error::CoroutineUnresumable)
    }
}

/// The error a failed resume left on top of `thread`, made as `Thread::resume` makes it: a
/// wrapped Rust error as it was raised, a wrapped panic resumed here, a memory error as
/// `MemoryError`, any other value as its text with the coroutine's traceback appended.
#[cold]
fn raised(lua: &Lua, thread: &Thread, status: c_int) -> mlua::Error {
    let co = thread.state();
    // Taken off the coroutine as an mlua value: mlua answers a wrapped error as `Value::Error`
    // and resumes a wrapped panic while converting (the caller's `catch_unwind` holds it).
    // SAFETY: the closure runs inside exec_raw's protected call on `state`, with room for the
    // one value it moves there from the dead coroutine.
    let value = unsafe { lua.exec_raw::<Value>((), |state| ffi::lua_xmove(co, state, 1)) };
    let value = match value {
        Ok(Value::Error(err)) => return *err,
        Ok(value) => value,
        Err(err) => return err,
    };
    if status == ffi::LUA_ERRMEM {
        return mlua::Error::MemoryError(text_of(&value));
    }
    // `luaL_tolstring` may call `__tostring` and allocates: inside exec_raw's protection.
    // SAFETY: the value is the one argument on top; the closure leaves one string there.
    let text = unsafe {
        lua.exec_raw::<LuaString>(value, |state| {
            let message = ffi::luaL_tolstring(state, -1, ptr::null_mut());
            if ffi::lua_checkstack(state, ffi::LUA_TRACEBACK_STACK) != 0 {
                ffi::luaL_traceback(state, co, message, 0);
                ffi::lua_remove(state, -2);
            }
            ffi::lua_remove(state, -2);
        })
    };
    match text {
        Ok(text) => mlua::Error::RuntimeError(text.to_string_lossy()),
        Err(err) => err,
    }
}

/// A value's text as mlua writes an error value it could not make a message of.
fn text_of(value: &Value) -> String {
    match value {
        Value::String(s) => s.to_string_lossy(),
        other => format!("<{}>", other.type_name()),
    }
}

/// A new coroutine with an empty stack, for a root task that has none to reuse. It is made on
/// the calling state, so it shares the main thread's globals when called outside any task.
pub(crate) fn new_coroutine(lua: &Lua) -> mlua::Result<Thread> {
    // SAFETY: lua_newthread allocates, inside exec_raw's protected call; it pushes one thread.
    unsafe {
        lua.exec_raw::<Thread>((), |state| {
            ffi::lua_newthread(state);
        })
    }
}

/// Reads `table[key]` (both registry values) raw onto the coroutine's stack; answers whether it
/// is a function. When it is not, the stack is left empty.
///
/// # Safety
/// `thread`'s stack is empty and the coroutine is not running; `table` holds a table.
pub(crate) unsafe fn push_field(thread: &Thread, table: &RegistryKey, key: &RegistryKey) -> bool {
    let co = thread.state();
    // SAFETY: an empty coroutine has 40 free slots, we use two; raw reads of tables call no
    // metamethod and allocate nothing.
    unsafe {
        ffi::lua_rawgeti(co, ffi::LUA_REGISTRYINDEX, table.id().into());
        ffi::lua_rawgeti(co, ffi::LUA_REGISTRYINDEX, key.id().into());
        ffi::lua_rawget(co, -2);
        if ffi::lua_type(co, -1) != ffi::LUA_TFUNCTION {
            ffi::lua_settop(co, 0);
            return false;
        }
        ffi::lua_replace(co, -2);
    }
    true
}

/// Pushes a message that allocates nothing (nil, a boolean, a number, an integer, a vector)
/// straight onto the coroutine; answers `false`, pushing nothing, for any other message.
///
/// # Safety
/// The coroutine is not running and has a free slot (an empty one has 40).
pub(crate) unsafe fn push_scalar(thread: &Thread, message: &Message) -> bool {
    // SAFETY: the caller's contract: a free slot on a coroutine that is not running.
    unsafe { value::push_scalar(thread.state(), message) }
}

/// What the protected push is handed through its light userdata.
struct PushRequest<'a> {
    lua: &'a Lua,
    message: &'a Message,
    failure: Option<mlua::Error>,
}

/// The C function [`push_protected`] calls: builds the message on its own state.
unsafe extern "C-unwind" fn push_message(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: the one argument is the light userdata `push_protected` passed, pointing at a
    // request that outlives this call; we run inside its `lua_pcall`, so the build's raises
    // are caught there. Nothing that needs dropping is made here: the build records a Rust-side
    // failure in the request instead of raising.
    unsafe {
        let request = ffi::lua_tolightuserdata(state, 1).cast::<PushRequest<'_>>();
        ffi::lua_settop(state, 0);
        let request = &mut *request;
        if write_protected(request.lua, state, request.message, &mut request.failure) {
            1
        } else {
            0
        }
    }
}

/// The function [`push_protected`] calls, made once per VM and kept in its registry.
pub(crate) fn protected_pusher(lua: &Lua) -> mlua::Result<RegistryKey> {
    // SAFETY: `push_message` follows the C function contract above.
    let function = unsafe { lua.create_c_function(push_message) }?;
    lua.create_registry_value(function)
}

/// Builds `message` (a string, a buffer, a table, a resource) onto the coroutine: inside one
/// `lua_pcall` of `pusher` (see [`protected_pusher`]) on the calling state, since the build
/// allocates and may raise, then moved over. No closure is made per call and the value does
/// not pass through mlua's reference thread.
///
/// # Errors
/// The build's own refusal, or `MemoryError` when the VM is out of memory.
///
/// # Safety
/// The coroutine is not running and has a free slot; `pusher` came from [`protected_pusher`]
/// on this VM.
pub(crate) unsafe fn push_protected(
    lua: &Lua,
    thread: &Thread,
    pusher: &RegistryKey,
    message: &Message,
) -> mlua::Result<()> {
    let state = lua.state();
    let mut request = PushRequest {
        lua,
        message,
        failure: None,
    };
    // SAFETY: three slots are checked on the calling state (which has room outside a deep
    // call); the pcall protects everything that allocates; on return the stack holds the
    // value (status OK and one result) or the error, which we read and pop.
    let (status, text) = unsafe {
        let top = ffi::lua_gettop(state);
        if ffi::lua_checkstack(state, 3) == 0 {
            return Err(mlua::Error::runtime(
                "Luau stack overflow while building a message",
            ));
        }
        ffi::lua_rawgeti(state, ffi::LUA_REGISTRYINDEX, pusher.id().into());
        ffi::lua_pushlightuserdata(state, ptr::addr_of_mut!(request).cast::<c_void>());
        let status = ffi::lua_pcall(state, 1, 1, 0);
        let text = if status == ffi::LUA_OK {
            if request.failure.is_none() {
                ffi::lua_xmove(state, thread.state(), 1);
            }
            String::new()
        } else {
            string_at(state, -1)
        };
        ffi::lua_settop(state, top);
        (status, text)
    };
    if let Some(failure) = request.failure {
        return Err(failure);
    }
    match status {
        ffi::LUA_OK => Ok(()),
        ffi::LUA_ERRMEM => Err(mlua::Error::MemoryError(text)),
        _ => Err(mlua::Error::RuntimeError(text)),
    }
}

/// The text of an error value, as mlua reads one off the stack (a string's bytes, lossily).
///
/// # Safety
/// `idx` is a valid index of `state`.
unsafe fn string_at(state: *mut ffi::lua_State, idx: c_int) -> String {
    // SAFETY: `lua_tolstring` of a string value reads it in place; other values are named by
    // their type without converting them (a conversion could allocate).
    unsafe {
        if ffi::lua_type(state, idx) != ffi::LUA_TSTRING {
            return "<error>".to_owned();
        }
        let mut len = 0usize;
        let data = ffi::lua_tolstring(state, idx, &mut len);
        String::from_utf8_lossy(std::slice::from_raw_parts(data.cast::<u8>(), len)).into_owned()
    }
}
