//! What `pcall`, `xpcall` and `coroutine.resume` hand the code that caught an error a Rust
//! function raised: the error's text, as the docs quote it.
//!
//! An error a Rust function raises reaches Luau as mlua's error object: a userdata that
//! `typeof` calls `"error"`, whose `tostring` reads `runtime error: <text>` followed by the
//! stack where it was raised. A script that compares what it caught with a documented text, or
//! joins it into a string, needs the text itself, so the functions that catch turn the object
//! into it. The stack is not lost where it matters: an error nobody catches fails its task, and
//! the task's report carries the stack.

use std::ffi::{c_int, CStr};

use mlua::{ffi, Function, Lua, Value};

/// The `__type` mlua gives its error object.
const ERROR_TYPE: &CStr = c"error";

/// The function that answers a caught value as the code catching it should see it: mlua's
/// error object becomes its text ([`error_message`](super::error_message)); any other value
/// is answered as it is.
pub(crate) fn text_function(lua: &Lua) -> mlua::Result<Function> {
    lua.create_function(|lua, caught: Value| match caught {
        Value::Error(error) => lua
            .create_string(super::error_message(&error))
            .map(Value::String),
        other => Ok(other),
    })
}

/// Where the table handed to [`replace_with_text`] keeps [`text_function`]'s function.
pub(crate) const TEXT_SLOT: ffi::lua_Integer = 2;

/// Replaces the value at the top of `state` with its text when it is mlua's error object,
/// calling [`text_function`]'s function, which the table at `table_index` (an absolute or
/// pseudo index) holds at [`TEXT_SLOT`]. Any other value is left as it is, at the cost of one
/// type check.
///
/// # Safety
/// `state` is a running Luau thread with a value at its top, on the thread that owns its VM,
/// and `table_index` holds a table with the function [`text_function`] made in that VM. It may
/// allocate and so raise through Luau: call it only where a raise leaves nothing of the
/// caller's live.
pub(crate) unsafe fn replace_with_text(state: *mut ffi::lua_State, table_index: c_int) {
    // SAFETY: the caller's contract; every push is within the three slots checked here, and
    // the call is protected, so what the text function raises is caught and kept instead.
    unsafe {
        if ffi::lua_type(state, -1) != ffi::LUA_TUSERDATA {
            return;
        }
        ffi::lua_rawcheckstack(state, 3);
        if ffi::luaL_getmetafield(state, -1, c"__type".as_ptr()) == ffi::LUA_TNIL {
            return;
        }
        let named = ffi::lua_tolstring(state, -1, std::ptr::null_mut());
        let is_error = !named.is_null() && CStr::from_ptr(named) == ERROR_TYPE;
        ffi::lua_pop(state, 1);
        if !is_error {
            return;
        }
        ffi::lua_rawgeti(state, table_index, TEXT_SLOT);
        ffi::lua_pushvalue(state, -2);
        // On success the text replaces the object; on failure (the VM out of memory, or the
        // object a Rust panic's, which mlua raises again) what was raised replaces it, as the
        // object's own contents may have been taken.
        ffi::lua_pcall(state, 1, 1, 0);
        ffi::lua_remove(state, -2);
    }
}

/// Wraps the VM's `coroutine.resume` so that a coroutine that raised an error a Rust function
/// made answers `false` and its text, as `pcall` does. Call it before the sandbox freezes the
/// `coroutine` library.
pub(crate) fn install_resume(lua: &Lua) -> mlua::Result<()> {
    let coroutine: mlua::Table = lua.globals().raw_get("coroutine")?;
    let luau: Function = coroutine.raw_get("resume")?;
    let texts = lua.create_table()?;
    texts.raw_set(TEXT_SLOT, text_function(lua)?)?;
    // SAFETY: inside exec_raw's protected call, with Luau's `resume` and the table pushed as its
    // arguments and the free slots mlua reserved: the closure takes both as its upvalues.
    let resume = unsafe {
        lua.exec_raw::<Function>((luau, texts), |state| {
            ffi::lua_pushcclosurek(state, resume_caught, c"resume".as_ptr(), 2, None);
        })
    }?;
    coroutine.raw_set("resume", resume)
}

/// `coroutine.resume(co, ...)`: Luau's own (upvalue 1), whose failure's error, when it is
/// mlua's error object, becomes its text ([`replace_with_text`], with upvalue 2's table).
unsafe extern "C-unwind" fn resume_caught(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: Luau calls us with a valid `state`. Luau's `resume` never yields the thread that
    // calls it (a coroutine's yield ends the resume instead), so calling it here with
    // `lua_call` keeps this frame's contract; what it raises (a bad argument) leaves through
    // this frame with nothing of ours live.
    unsafe {
        let arguments = ffi::lua_gettop(state);
        ffi::lua_rawcheckstack(state, 1);
        ffi::lua_pushvalue(state, ffi::lua_upvalueindex(1));
        ffi::lua_insert(state, 1);
        ffi::lua_call(state, arguments, ffi::LUA_MULTRET);
        let results = ffi::lua_gettop(state);
        if results == 2 && ffi::lua_toboolean(state, 1) == 0 {
            replace_with_text(state, ffi::lua_upvalueindex(2));
        }
        results
    }
}
