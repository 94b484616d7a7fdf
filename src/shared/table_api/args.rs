//! The arguments of the shared-table functions as they come off the Luau stack: a key with its
//! exact type, a value to store, and the table itself.

use std::ffi::c_int;

use bytes::Bytes;
use mlua::state::RawLua;
use mlua::{ffi, FromLua, Lua, Value};

use super::raw::{handle_in, held};
use super::Handle;
use crate::shared::table::error::{SharedTableError, SharedTableErrorKind};
use crate::shared::table::handle::{bad_key, value_of};
use crate::shared::table::key::{Entry, Key, KeyIn, KeyRef};
use crate::value::path;
use crate::value::read::{Reader, Refusal};
use crate::value::{Limits, Message, TransferErrorKind};
use crate::vm::a_type;

/// A key as Luau gave it, read off the stack with its exact type; a key that can't be one is
/// kept as its description, so a read answers nil and a write raises naming the table.
///
/// A string key read off the stack is not copied: a read looks it up by the bytes Luau holds,
/// and only a write (or a nested table's handle) makes a key of its own.
pub(super) enum KeyArg {
    Key(Key),
    /// A string's bytes as Luau holds them. Only ever made by `from_stack` for a callback's
    /// argument, which stays on the stack (and so alive and unmoved: Luau's collector does not
    /// move strings) until the callback returns; a `KeyArg` is dropped before that.
    Str(*const u8, usize),
    Bad(&'static str),
}

impl KeyArg {
    /// The key borrowed for a lookup; `None` for a value that can't be a key.
    pub(super) fn key_ref(&self) -> Option<KeyRef<'_>> {
        match self {
            KeyArg::Key(key) => Some(key.as_ref()),
            // SAFETY: see `KeyArg::Str`: the bytes live on the stack for as long as `self`.
            KeyArg::Str(ptr, len) => Some(KeyRef::String(unsafe {
                std::slice::from_raw_parts(*ptr, *len)
            })),
            KeyArg::Bad(_) => None,
        }
    }

    /// The key for a write, borrowed as it is.
    pub(super) fn key_in(
        &self,
        at: impl FnOnce() -> String,
    ) -> Result<KeyIn<'_>, SharedTableError> {
        match self {
            KeyArg::Key(key) => Ok(KeyIn::Shared(key)),
            KeyArg::Str(..) => match self.key_ref() {
                Some(key) => Ok(KeyIn::Bytes(key)),
                None => Err(bad_key(&at(), "a value of this type")),
            },
            KeyArg::Bad(what) => Err(bad_key(&at(), what)),
        }
    }

    pub(super) fn key(&self, at: impl FnOnce() -> String) -> Result<Key, SharedTableError> {
        match self {
            KeyArg::Key(key) => Ok(key.clone()),
            KeyArg::Str(..) => match self.key_ref() {
                Some(key) => Ok(key.to_key()),
                None => Err(bad_key(&at(), "a value of this type")),
            },
            KeyArg::Bad(what) => Err(bad_key(&at(), what)),
        }
    }
}

fn article_type(ty: c_int) -> &'static str {
    match ty {
        ffi::LUA_TNIL => "a nil",
        ffi::LUA_TBOOLEAN => "a boolean",
        ffi::LUA_TVECTOR => "a vector",
        ffi::LUA_TTABLE => "a table",
        ffi::LUA_TFUNCTION => "a function",
        ffi::LUA_TUSERDATA => "a userdata",
        ffi::LUA_TLIGHTUSERDATA => "a light userdata",
        ffi::LUA_TTHREAD => "a coroutine",
        ffi::LUA_TBUFFER => "a buffer",
        _ => "a value of this type",
    }
}

impl FromLua for KeyArg {
    fn from_lua(value: Value, _lua: &Lua) -> mlua::Result<Self> {
        // Off the stack a whole number and an integer look alike; Luau code means the number.
        Ok(match value {
            Value::Integer(i) => KeyArg::Key(Key::Number(i as f64)),
            Value::Number(n) => Key::number(n).map_or(KeyArg::Bad("a NaN"), KeyArg::Key),
            Value::String(s) => KeyArg::Key(Key::String(Bytes::copy_from_slice(&s.as_bytes()))),
            Value::Nil => KeyArg::Bad("a nil"),
            Value::Boolean(_) => KeyArg::Bad("a boolean"),
            _ => KeyArg::Bad("a value of this type"),
        })
    }

    unsafe fn from_stack(idx: c_int, lua: &RawLua) -> mlua::Result<Self> {
        // SAFETY: mlua hands a valid index.
        Ok(unsafe { KeyArg::from_raw(lua.state(), idx) })
    }
}

impl KeyArg {
    /// The key at `idx` of `state`'s stack. A string key stays where Luau holds it, so the
    /// answer may be used only while that slot does.
    ///
    /// # Safety
    /// `idx` is a valid index of `state`.
    pub(super) unsafe fn from_raw(state: *mut ffi::lua_State, idx: c_int) -> KeyArg {
        // SAFETY: the caller's contract; these calls only read the slot.
        unsafe {
            match ffi::lua_type(state, idx) {
                ffi::LUA_TNUMBER => Key::number(ffi::lua_tonumber(state, idx))
                    .map_or(KeyArg::Bad("a NaN"), KeyArg::Key),
                ffi::LUA_TINTEGER => KeyArg::Key(Key::Integer(ffi::lua_tointeger64(
                    state,
                    idx,
                    std::ptr::null_mut(),
                ))),
                ffi::LUA_TSTRING => {
                    let mut len = 0usize;
                    let ptr = ffi::lua_tolstring(state, idx, &mut len);
                    KeyArg::Str(ptr as *const u8, len)
                }
                ty => KeyArg::Bad(article_type(ty)),
            }
        }
    }
}

/// A value as Luau gave it: data read with its exact type, a handle (copied in when stored), or
/// the refusal the reader gave, rendered once the caller knows where it was going.
pub(super) enum ValueArg {
    Data(Message),
    Handle(Handle),
    Refused(Refusal),
}

impl ValueArg {
    pub(super) fn entry(
        &self,
        at: impl FnOnce() -> String,
    ) -> Result<Option<Entry>, SharedTableError> {
        match self {
            ValueArg::Data(m) => value_of(at, m),
            ValueArg::Handle(h) => Ok(Some(Entry::Table(h.picture()?))),
            ValueArg::Refused(r) => Err(SharedTableError::new(
                SharedTableErrorKind::NotData,
                format!(
                    "{}: {} can't be stored in a shared table",
                    path::render(&at(), &r.segments),
                    refusal_what(&r.kind)
                ),
            )),
        }
    }
}

pub(super) fn refusal_what(kind: &TransferErrorKind) -> String {
    match kind {
        TransferErrorKind::Function => "a function".into(),
        TransferErrorKind::Coroutine => "a coroutine".into(),
        TransferErrorKind::UserData => "a userdata".into(),
        TransferErrorKind::LightUserData => "a light userdata".into(),
        TransferErrorKind::Unsupported { type_name } => {
            format!("{} {type_name}", crate::vm::article(type_name))
        }
        TransferErrorKind::Metatable => "a table with a metatable".into(),
        TransferErrorKind::Cycle => "a table that contains itself".into(),
        TransferErrorKind::TooDeep { max_depth } => {
            format!("a table nested deeper than {max_depth} tables")
        }
        TransferErrorKind::KeyType { type_name } => {
            format!("{} {type_name} key", crate::vm::article(type_name))
        }
        TransferErrorKind::NanKey => "a NaN key".into(),
        TransferErrorKind::TooLarge { limit } => format!("a value over {limit} bytes"),
        TransferErrorKind::NoStack => {
            "a value read while its VM couldn't grow its stack (out of memory)".into()
        }
    }
}

impl FromLua for ValueArg {
    fn from_lua(value: Value, lua: &Lua) -> mlua::Result<Self> {
        if let Some(h) = handle_in(lua, &value) {
            return Ok(ValueArg::Handle(h));
        }
        Ok(match Message::from_lua(&value, "") {
            Ok(m) => ValueArg::Data(m),
            Err(e) => ValueArg::Refused(Refusal {
                kind: e.reason,
                segments: Vec::new(),
            }),
        })
    }

    unsafe fn from_stack(idx: c_int, lua: &RawLua) -> mlua::Result<Self> {
        let state = lua.state();
        // Scalars are read straight off the slot: the reader's setup is most of a write's
        // reading cost for `t.x = 1`.
        // SAFETY: mlua hands a valid index; these calls only read the slot.
        let scalar = unsafe {
            match ffi::lua_type(state, idx) {
                ffi::LUA_TNIL => Some(Message::Nil),
                ffi::LUA_TBOOLEAN => Some(Message::Boolean(ffi::lua_toboolean(state, idx) != 0)),
                ffi::LUA_TNUMBER => Some(Message::Number(ffi::lua_tonumber(state, idx))),
                ffi::LUA_TINTEGER => Some(Message::Integer(ffi::lua_tointeger64(
                    state,
                    idx,
                    std::ptr::null_mut(),
                ))),
                _ => None,
            }
        };
        if let Some(m) = scalar {
            return Ok(ValueArg::Data(m));
        }
        // SAFETY: mlua hands a valid index; the handle lives while its slot does, and is
        // cloned before the callback returns.
        if let Some(h) = unsafe { held(state, idx).as_ref() } {
            return Ok(ValueArg::Handle(h.clone()));
        }
        // SAFETY: as above; the reader restores the stack top.
        Ok(
            match unsafe { Reader::new(lua, Limits::MAX_MESSAGE_BYTES).read_at(idx) } {
                Ok(m) => ValueArg::Data(m),
                Err(r) => ValueArg::Refused(r),
            },
        )
    }
}

/// The table argument of a shared-table function, read off the stack: the handle (its userdata
/// stays in the argument's slot, and so alive, for the whole callback), or whatever was given
/// instead, kept for the refusal's text.
pub(super) enum TableArg {
    Held(*const Handle),
    Owned(Handle),
    Other(Value),
}

impl TableArg {
    /// The handle, or the refusal of the call `what` naming what it got.
    pub(super) fn handle(&self, what: &str) -> mlua::Result<&Handle> {
        match self {
            // SAFETY: see `TableArg`: the slot holds the userdata until the callback returns,
            // and a `TableArg` does not outlive the callback.
            TableArg::Held(h) => Ok(unsafe { &**h }),
            TableArg::Owned(h) => Ok(h),
            TableArg::Other(v) => Err(not_a_shared_table(v, what)),
        }
    }
}

impl FromLua for TableArg {
    fn from_lua(value: Value, lua: &Lua) -> mlua::Result<Self> {
        Ok(match handle_in(lua, &value) {
            Some(h) => TableArg::Owned(h),
            None => TableArg::Other(value),
        })
    }

    unsafe fn from_stack(idx: c_int, lua: &RawLua) -> mlua::Result<Self> {
        // SAFETY: mlua hands a valid index, whose slot lives for the callback.
        let h = unsafe { held(lua.state(), idx) };
        if h.is_null() {
            // SAFETY: as above.
            return Ok(TableArg::Other(unsafe { Value::from_stack(idx, lua)? }));
        }
        Ok(TableArg::Held(h))
    }
}

pub(super) fn not_a_shared_table(value: &Value, what: &str) -> mlua::Error {
    mlua::Error::runtime(format!(
        "{what}: t must be a shared table, got {}",
        a_type(value)
    ))
}
