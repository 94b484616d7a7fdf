//! `Message` → Luau: builds the value on the Luau stack inside one protected call.
//!
//! Building allocates (tables, strings, buffers), and an allocation can raise a memory error, so
//! the whole build runs under `Lua::exec_raw`, whose protected call turns such a raise into an
//! `mlua::Error` instead of unwinding through the caller.

use std::ffi::c_int;

use mlua::{ffi, Lua, Value};

use super::{Limits, MapKey, Message};

/// Stack slots one table level needs while building: the table, a key and a value.
const SLOTS_PER_LEVEL: c_int = 3;

/// Builds one message in `lua`, returning the value it made.
pub(crate) fn build(lua: &Lua, message: &Message) -> mlua::Result<Value> {
    let mut failure: Option<mlua::Error> = None;
    // SAFETY: the closure pushes exactly one value on success and uses only the state it is
    // given; exec_raw restores the stack and protects the allocations it makes.
    let value = unsafe {
        lua.exec_raw::<Value>((), |state| {
            let mut builder = Builder {
                lua,
                state,
                failure: &mut failure,
            };
            builder.push(message, 0);
        })
    }?;
    match failure {
        Some(err) => Err(err),
        None => Ok(value),
    }
}

/// Builds one message on `state`, for a caller that is already inside a protected call there
/// (the worker's per-VM push function, `vm/coroutine.rs`; the engine's settle of a promise
/// handle): the value is left on top and `true` answered, or the Rust-side refusal recorded in
/// `failure` and `false` answered. A Luau memory error raises, to the caller's protected call.
///
/// # Safety
/// Runs inside a protected call on `state`, which is `lua`'s current state.
pub(crate) unsafe fn write_protected(
    lua: &Lua,
    state: *mut ffi::lua_State,
    message: &Message,
    failure: &mut Option<mlua::Error>,
) -> bool {
    // SAFETY: the caller's contract: allocations here raise to its protected call.
    if unsafe { ffi::lua_checkstack(state, SLOTS_PER_LEVEL) } == 0 {
        *failure = Some(mlua::Error::runtime(
            "Luau stack overflow while building a message",
        ));
        return false;
    }
    let mut builder = Builder {
        lua,
        state,
        failure,
    };
    builder.push(message, 0)
}

/// Pushes a message that allocates nothing (nil, a boolean, an integer, a number, a vector)
/// onto `state`, outside any protected call if need be: none of these pushes can raise.
/// Answers `false`, pushing nothing, for any other message.
///
/// # Safety
/// `state` has a free slot.
pub(crate) unsafe fn push_scalar(state: *mut ffi::lua_State, message: &Message) -> bool {
    // SAFETY: the caller's contract; none of these pushes allocates.
    unsafe {
        match message {
            Message::Nil => ffi::lua_pushnil(state),
            Message::Boolean(b) => ffi::lua_pushboolean(state, c_int::from(*b)),
            Message::Integer(i) => ffi::lua_pushinteger64(state, *i),
            Message::Number(n) => ffi::lua_pushnumber(state, *n),
            Message::Vector([x, y, z]) => ffi::lua_pushvector(state, *x, *y, *z),
            _ => return false,
        }
    }
    true
}

struct Builder<'a> {
    lua: &'a Lua,
    state: *mut ffi::lua_State,
    /// The first error a Rust-side step (a userdata, a limit) met; the build stops there.
    failure: &'a mut Option<mlua::Error>,
}

impl Builder<'_> {
    /// Pushes `message` (one slot). On failure records it in `self.failure` and returns `false`.
    fn push(&mut self, message: &Message, depth: usize) -> bool {
        let state = self.state;
        // SAFETY: we run inside exec_raw's protected call on `state`; each arm pushes one value
        // after check_stack made room for it.
        unsafe {
            if push_scalar(state, message) {
                return true;
            }
            match message {
                Message::String(s) => {
                    ffi::lua_pushlstring(state, s.as_ptr().cast(), s.len());
                }
                Message::Buffer(b) => {
                    let data = ffi::lua_newbuffer(state, b.len());
                    if !b.is_empty() {
                        std::ptr::copy_nonoverlapping(b.as_ptr(), data.cast::<u8>(), b.len());
                    }
                }
                Message::List(items) => return self.push_list(items, depth + 1),
                Message::Map(entries) => return self.push_map(entries, depth + 1),
                Message::Resource(handle) => {
                    let made = self.lua.create_userdata(handle.clone()).and_then(|ud| {
                        // exec_raw_lua hands back the same state this build runs on.
                        self.lua.exec_raw_lua(|raw| raw.push(ud))
                    });
                    if let Err(err) = made {
                        return self.fail(err);
                    }
                }
                // Pushed by push_scalar above.
                Message::Nil
                | Message::Boolean(_)
                | Message::Integer(_)
                | Message::Number(_)
                | Message::Vector(_) => {}
            }
        }
        true
    }

    #[cold]
    fn fail(&mut self, err: mlua::Error) -> bool {
        *self.failure = Some(err);
        false
    }

    /// Refuses a Rust-built message deeper than Luau-side messages may be.
    fn enter(&mut self, depth: usize) -> bool {
        if depth > Limits::MAX_DEPTH {
            return self.fail(mlua::Error::runtime(format!(
                "a message nested deeper than {} tables can't be built in Luau",
                Limits::MAX_DEPTH
            )));
        }
        // SAFETY: protected by exec_raw; checkstack may grow the stack.
        if unsafe { ffi::lua_checkstack(self.state, SLOTS_PER_LEVEL) } == 0 {
            return self.fail(mlua::Error::runtime(
                "Luau stack overflow while building a message",
            ));
        }
        true
    }

    fn push_list(&mut self, items: &[Message], depth: usize) -> bool {
        if !self.enter(depth) {
            return false;
        }
        let state = self.state;
        // Luau table lengths are ints: a longer list can't be a Luau array anyway, and its
        // tail goes in with explicit number keys below.
        let narr = c_int::try_from(items.len()).unwrap_or(c_int::MAX);
        // SAFETY: protected by exec_raw, room checked by enter. The array part is sized up
        // front, so every rawseti below lands in it without a rehash.
        unsafe { ffi::lua_createtable(state, narr, 0) };
        let (head, tail) = items.split_at(items.len().min(narr as usize));
        for (index, item) in (1..=narr).zip(head) {
            // Numbers and integers, the bulk of large lists, skip the general dispatch.
            match item {
                // SAFETY: protected by exec_raw; enter left a slot for the value.
                Message::Number(n) => unsafe { ffi::lua_pushnumber(state, *n) },
                // SAFETY: as above.
                Message::Integer(i) => unsafe { ffi::lua_pushinteger64(state, *i) },
                other => {
                    if !self.push(other, depth) {
                        return false;
                    }
                }
            }
            // SAFETY: the table is at -2 and the value at -1.
            unsafe { ffi::lua_rawseti_(state, -2, index) };
        }
        for (offset, item) in tail.iter().enumerate() {
            if !self.push(item, depth) {
                return false;
            }
            let index = narr as usize + offset + 1;
            // SAFETY: the table is at -3 after the key goes under the value at -1.
            unsafe {
                ffi::lua_pushnumber(state, index as f64);
                ffi::lua_insert(state, -2);
                ffi::lua_rawset(state, -3);
            }
        }
        true
    }

    fn push_map(&mut self, entries: &[(MapKey, Message)], depth: usize) -> bool {
        if !self.enter(depth) {
            return false;
        }
        let state = self.state;
        let nrec = c_int::try_from(entries.len()).unwrap_or(c_int::MAX);
        // SAFETY: protected by exec_raw, room checked by enter.
        unsafe { ffi::lua_createtable(state, 0, nrec) };
        for (key, value) in entries {
            // SAFETY: one slot for the key, reserved by enter.
            unsafe {
                match key {
                    MapKey::Integer(i) => ffi::lua_pushinteger64(state, *i),
                    MapKey::Number(n) if n.is_nan() => {
                        return self
                            .fail(mlua::Error::runtime("a NaN map key can't be built in Luau"));
                    }
                    MapKey::Number(n) => ffi::lua_pushnumber(state, *n),
                    MapKey::String(s) => {
                        ffi::lua_pushlstring(state, s.as_ptr().cast(), s.len());
                    }
                }
            }
            if !self.push(value, depth) {
                return false;
            }
            // SAFETY: table at -3, key at -2, value at -1.
            unsafe { ffi::lua_rawset(state, -3) };
        }
        true
    }
}
