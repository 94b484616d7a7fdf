//! The public conversions between Luau and [`Message`]: the inherent `from_lua`, `read_within`
//! and `to_lua`, and mlua's `FromLua`/`IntoLua`, which take the exact stack path.

use std::ffi::c_int;

use bytes::Bytes;
use mlua::state::RawLua;
use mlua::{ffi, FromLua, IntoLua, Lua, MultiValue, Table, Value};

use super::read::{Reader, Refusal};
use super::{write, Limits, Message, ResourceHandle, TransferErrorKind, MAX_EXACT_INTEGER};
use crate::value::TransferError;

/// The root name `FromLua` uses in its paths.
const DEFAULT_ROOT: &str = "message";

impl Message {
    /// Copies a Luau value into a `Message`, refusing what can't cross.
    ///
    /// `root` names the value in the error path (`message`, `args`, `result`…).
    ///
    /// Inside a table, Luau integers and numbers stay apart exactly. A *top-level*
    /// `Value::Integer` is ambiguous (mlua uses it for whole numbers too) and becomes
    /// [`Message::Integer`]; use the [`FromLua`] path (function arguments and results) to read a
    /// top-level value with its exact type. Skein's own crossings (a dispatch's arguments, a
    /// task's or job's result, `eval`) read it so: a top-level number is a [`Message::Number`]
    /// there, as it is nested.
    ///
    /// # Errors
    /// A [`TransferError`] naming the path and the reason: a function, a coroutine, a userdata
    /// other than [`ResourceHandle`], a light userdata, a table with a metatable, a key that is
    /// not an integer, number or string, a NaN key, a table that contains itself, or tables
    /// nested deeper than [`Limits::MAX_DEPTH`], or a value weighing more than
    /// [`Limits::MAX_MESSAGE_BYTES`] ([`TransferErrorKind::TooLarge`]).
    ///
    /// ```
    /// use mlua::Lua;
    /// use skein::Message;
    ///
    /// let lua = Lua::new();
    /// let value = lua.load("{ co = coroutine.create(print) }").eval().unwrap();
    /// let err = Message::from_lua(&value, "args").unwrap_err();
    /// assert_eq!(err.to_string(), "args.co: a coroutine can't cross a worker or event boundary");
    /// ```
    pub fn from_lua(value: &Value, root: &str) -> Result<Message, TransferError> {
        Self::read_within(value, root, Limits::MAX_MESSAGE_BYTES)
    }

    /// Like [`Message::from_lua`], but refuses as soon as the running
    /// [`queue_weight`](Message::queue_weight) passes `limit_bytes`, before copying the rest: a
    /// huge table under a small limit costs only the part read before the refusal.
    ///
    /// # Errors
    /// As [`Message::from_lua`], plus [`TransferErrorKind::TooLarge`] naming the path where the
    /// budget ran out.
    ///
    /// ```
    /// use mlua::Lua;
    /// use skein::Message;
    ///
    /// let lua = Lua::new();
    /// let value = lua.load("{ 'abc', 'def' }").eval().unwrap();
    /// assert!(Message::read_within(&value, "message", 16 * 3 + 6).is_ok());
    /// let err = Message::read_within(&value, "message", 16 * 3 + 5).unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     "message[2]: a value weighing more than its limit of 53 bytes can't cross a worker or event boundary"
    /// );
    /// ```
    pub fn read_within(
        value: &Value,
        root: &str,
        limit_bytes: usize,
    ) -> Result<Message, TransferError> {
        read_value(value, limit_bytes).map_err(|r| r.into_error(root))
    }

    /// [`Message::from_lua`], answering the copy's weight (by [`Message::queue_weight`]) as well,
    /// counted while it was read: what a caller charges to a budget costs no second walk.
    pub(crate) fn read_weighed(
        value: &Value,
        root: &str,
    ) -> Result<(Message, usize), TransferError> {
        read_value_weighed(value, Limits::MAX_MESSAGE_BYTES).map_err(|r| r.into_error(root))
    }

    /// Reads the slots `1..=n` of `table` (nil where a slot is empty), each as its own copy
    /// under the bound of one copy ([`Limits::MAX_MESSAGE_BYTES`]), as `jobs.map` reads the
    /// results of a chunk: each is one result. Answers them with their total weight; a refusal
    /// answers the slot (from 1) and the error, its path starting at `root`.
    pub(crate) fn read_slots(
        table: &Table,
        n: usize,
        root: &str,
    ) -> Result<(Vec<Message>, usize), (usize, TransferError)> {
        let lua = table.weak_lua().upgrade();
        let value = Value::Table(table.clone());
        lua.exec_raw_lua(|raw| {
            let mut reader = Reader::new(raw, Limits::MAX_MESSAGE_BYTES);
            // SAFETY: one checked slot holds the table; the reader's reservation, taken above
            // it with one slot more, holds one slot's value at a time and the reading of it.
            // Each value is read and popped, and the table is popped after, so the stack is as
            // it was.
            unsafe {
                let state = raw.state();
                let top = ffi::lua_gettop(state);
                let no_stack =
                    || Err((1, Refusal::new(TransferErrorKind::NoStack).into_error(root)));
                if ffi::lua_checkstack(state, 1) == 0 {
                    return no_stack();
                }
                if raw.push_value(&value).is_err() {
                    ffi::lua_settop(state, top);
                    let closed = Refusal::new(TransferErrorKind::Unsupported {
                        type_name: "table from a closed VM",
                    });
                    return Err((1, closed.into_error(root)));
                }
                if !reader.reserve(1) {
                    ffi::lua_settop(state, top);
                    return no_stack();
                }
                let at = ffi::lua_gettop(state);
                // A Luau array holds fewer than 2^31 slots.
                let n = c_int::try_from(n).unwrap_or(c_int::MAX);
                let mut out = Vec::with_capacity(n as usize);
                let mut weight = 0usize;
                for i in 1..=n {
                    ffi::lua_rawgeti_(state, at, i);
                    let read = reader.read_fresh();
                    ffi::lua_settop(state, at);
                    match read {
                        Ok((message, w)) => {
                            weight = weight.saturating_add(w);
                            out.push(message);
                        }
                        Err(refusal) => {
                            ffi::lua_settop(state, top);
                            return Err((i as usize, refusal.into_error(root)));
                        }
                    }
                }
                ffi::lua_settop(state, top);
                Ok((out, weight))
            }
        })
    }

    /// Builds this message as a value of `lua`.
    ///
    /// Tables are built whole inside Luau, with integers as Luau integers and numbers as
    /// numbers. A *top-level* [`Message::Integer`] can only be returned as `Value::Integer`,
    /// which mlua passes to Luau as a number; it is refused when that number could not hold it
    /// exactly (beyond ±2^53). Pass the message through [`IntoLua`] (as a function argument or
    /// result) to hand Luau a real integer, as Skein's own crossings do (a job's entry argument,
    /// an awaited result).
    ///
    /// # Errors
    /// A Luau memory error, a map with a NaN key, tables nested deeper than
    /// [`Limits::MAX_DEPTH`], or a top-level integer past ±2^53.
    ///
    /// ```
    /// use mlua::{Lua, Value};
    /// use skein::{MapKey, Message};
    ///
    /// let lua = Lua::new();
    /// let m = Message::Map(vec![(MapKey::String("n".into()), Message::Number(0.5))]);
    /// let Value::Table(t) = m.to_lua(&lua).unwrap() else { panic!() };
    /// assert_eq!(t.get::<f64>("n").unwrap(), 0.5);
    /// ```
    pub fn to_lua(&self, lua: &Lua) -> mlua::Result<Value> {
        match self {
            Message::Integer(i) if !(-MAX_EXACT_INTEGER..=MAX_EXACT_INTEGER).contains(i) => {
                Err(mlua::Error::runtime(format!(
                    "integer {i} would be rounded as a top-level Value; pass the Message through IntoLua"
                )))
            }
            Message::Integer(i) => Ok(Value::Integer(*i)),
            // Scalars go straight to their Value: read back off the stack, a whole number would
            // come back as Value::Integer.
            Message::Nil => Ok(Value::Nil),
            Message::Boolean(b) => Ok(Value::Boolean(*b)),
            Message::Number(n) => Ok(Value::Number(*n)),
            Message::Vector([x, y, z]) => Ok(Value::Vector(mlua::Vector::new(*x, *y, *z))),
            other => write::build(lua, other),
        }
    }
}

/// Reads a `Value` the caller already holds, taking the stack path for tables.
fn read_value(value: &Value, limit: usize) -> Result<Message, Refusal> {
    read_value_weighed(value, limit).map(|(message, _)| message)
}

/// [`read_value`], answering the copy's weight too (counted as it was read, not walked again).
fn read_value_weighed(value: &Value, limit: usize) -> Result<(Message, usize), Refusal> {
    let charge = |bytes: usize| {
        let weight = Limits::NODE_WEIGHT.saturating_add(bytes);
        if weight > limit {
            Err(Refusal::new(TransferErrorKind::TooLarge { limit }))
        } else {
            Ok(weight)
        }
    };
    match value {
        Value::Nil => charge(0).map(|w| (Message::Nil, w)),
        Value::Boolean(b) => charge(0).map(|w| (Message::Boolean(*b), w)),
        Value::Integer(i) => charge(0).map(|w| (Message::Integer(*i), w)),
        Value::Number(n) => charge(0).map(|w| (Message::Number(*n), w)),
        Value::Vector(v) => charge(0).map(|w| (Message::Vector([v.x(), v.y(), v.z()]), w)),
        Value::String(s) => {
            let bytes = s.as_bytes();
            let w = charge(bytes.len())?;
            Ok((Message::String(Bytes::copy_from_slice(&bytes)), w))
        }
        Value::Buffer(b) => {
            let w = charge(b.len())?;
            Ok((Message::Buffer(Bytes::from(b.to_vec())), w))
        }
        Value::Table(t) => {
            let lua = t.weak_lua().upgrade();
            lua.exec_raw_lua(|raw| {
                // SAFETY: one checked slot holds the table while the reader walks it; the
                // reader restores the top, and we pop the table after.
                unsafe {
                    let state = raw.state();
                    if ffi::lua_checkstack(state, 1) == 0 {
                        return Err(Refusal::new(TransferErrorKind::NoStack));
                    }
                    let top = ffi::lua_gettop(state);
                    let pushed = raw.push_value(value);
                    let result = match pushed {
                        Ok(()) => {
                            let mut reader = Reader::new(raw, limit);
                            reader.read_at(-1).map(|m| (m, reader.weight()))
                        }
                        Err(_) => Err(Refusal::new(TransferErrorKind::Unsupported {
                            type_name: "table from a closed VM",
                        })),
                    };
                    ffi::lua_settop(state, top);
                    result
                }
            })
        }
        Value::UserData(ud) => {
            let handle = ud
                .borrow::<ResourceHandle>()
                .map(|h| h.clone())
                .map_err(|_| Refusal::new(TransferErrorKind::UserData))?;
            let w = charge(handle.kind.len())?;
            Ok((Message::Resource(handle), w))
        }
        Value::Function(_) => Err(Refusal::new(TransferErrorKind::Function)),
        Value::Thread(_) => Err(Refusal::new(TransferErrorKind::Coroutine)),
        Value::LightUserData(_) => Err(Refusal::new(TransferErrorKind::LightUserData)),
        Value::Error(_) => Err(Refusal::new(TransferErrorKind::Unsupported {
            type_name: "error object",
        })),
        _ => Err(Refusal::new(TransferErrorKind::Unsupported {
            type_name: "value of an unknown type",
        })),
    }
}

/// Reads with the default root and the default budget ([`Limits::MAX_MESSAGE_BYTES`]); refusals become `mlua::Error::external`.
impl FromLua for Message {
    fn from_lua(value: Value, _lua: &Lua) -> mlua::Result<Self> {
        Message::from_lua(&value, DEFAULT_ROOT).map_err(mlua::Error::external)
    }

    unsafe fn from_stack(idx: c_int, lua: &RawLua) -> mlua::Result<Self> {
        // SAFETY: mlua hands us a valid index on `lua`'s current stack.
        unsafe { Reader::new(lua, Limits::MAX_MESSAGE_BYTES).read_at(idx) }
            .map_err(|r| mlua::Error::external(r.into_error(DEFAULT_ROOT)))
    }
}

/// A call argument read as a [`Message`] off the stack (so a whole number stays a number and an
/// integer an integer), keeping a refusal, named from `root`, for the callee to word.
pub(crate) struct MessageArg(pub(crate) Result<Message, TransferError>);

impl MessageArg {
    /// The root name refusals start from.
    pub(crate) const ROOT: &'static str = "value";
}

impl FromLua for MessageArg {
    fn from_lua(value: Value, _lua: &Lua) -> mlua::Result<Self> {
        Ok(MessageArg(Message::from_lua(&value, Self::ROOT)))
    }

    unsafe fn from_stack(idx: c_int, lua: &RawLua) -> mlua::Result<Self> {
        // SAFETY: mlua hands us a valid index on `lua`'s current stack.
        let read = unsafe { Reader::new(lua, Limits::MAX_MESSAGE_BYTES).read_at(idx) };
        Ok(MessageArg(read.map_err(|r| r.into_error(Self::ROOT))))
    }
}

/// A call's trailing arguments read as [`MessageArg`]s off the stack, so each whole number stays
/// a number and each integer an integer (`Variadic<MessageArg>` would read them through
/// `mlua::Value`, which makes every whole number an integer).
pub(crate) struct MessageArgs(pub(crate) Vec<MessageArg>);

impl MessageArgs {
    /// The arguments as one list, or the first refusal, its path naming the argument
    /// (`args[2].cb`).
    pub(crate) fn into_list(self) -> Result<Vec<Message>, TransferError> {
        let mut list = Vec::with_capacity(self.0.len());
        for (i, arg) in self.0.into_iter().enumerate() {
            let message = arg.0.map_err(|mut e| {
                let rest = e.path.strip_prefix(MessageArg::ROOT).unwrap_or(&e.path);
                e.path = format!("args[{}]{rest}", i + 1);
                e
            })?;
            list.push(message);
        }
        Ok(list)
    }
}

impl mlua::FromLuaMulti for MessageArgs {
    fn from_lua_multi(values: mlua::MultiValue, lua: &Lua) -> mlua::Result<Self> {
        values
            .into_iter()
            .map(|v| MessageArg::from_lua(v, lua))
            .collect::<mlua::Result<_>>()
            .map(MessageArgs)
    }

    unsafe fn from_stack_multi(nvals: c_int, lua: &RawLua) -> mlua::Result<Self> {
        let mut args = Vec::with_capacity(nvals.max(0) as usize);
        for i in 0..nvals {
            // SAFETY: mlua hands us `nvals` values on top of `lua`'s current stack.
            args.push(unsafe { MessageArg::from_stack(-nvals + i, lua) }?);
        }
        Ok(MessageArgs(args))
    }
}

/// A value read off the stack with its Luau type kept: a number is always `Value::Number`,
/// never the `Value::Integer` mlua makes of a whole number, so `Value::Integer` means a Luau
/// integer. What reads a call's arguments or a task's results through it copies a top-level
/// number as a number, as the same number nested in a table is copied.
pub(crate) struct ExactValue(pub(crate) Value);

impl FromLua for ExactValue {
    fn from_lua(value: Value, _lua: &Lua) -> mlua::Result<Self> {
        Ok(ExactValue(value))
    }

    unsafe fn from_stack(idx: c_int, lua: &RawLua) -> mlua::Result<Self> {
        // SAFETY: mlua hands us a valid index on `lua`'s current stack; reading a number's
        // type and value allocates nothing and cannot raise.
        unsafe { exact_stack_value(idx, lua) }.map(ExactValue)
    }
}

/// A task's results (or a call's trailing arguments) read as [`ExactValue`]s.
pub(crate) struct ExactValues(pub(crate) MultiValue);

impl mlua::FromLuaMulti for ExactValues {
    fn from_lua_multi(values: MultiValue, _lua: &Lua) -> mlua::Result<Self> {
        Ok(ExactValues(values))
    }

    unsafe fn from_stack_multi(nvals: c_int, lua: &RawLua) -> mlua::Result<Self> {
        let mut values = MultiValue::with_capacity(nvals.max(0) as usize);
        for i in 0..nvals {
            // SAFETY: mlua hands us `nvals` values on top of `lua`'s current stack.
            values.push_back(unsafe { exact_stack_value(-nvals + i, lua) }?);
        }
        Ok(ExactValues(values))
    }
}

/// The value at `idx`, a Luau number as `Value::Number` whatever its value.
///
/// # Safety
/// `idx` is a valid index on `lua`'s current stack.
unsafe fn exact_stack_value(idx: c_int, lua: &RawLua) -> mlua::Result<Value> {
    let state = lua.state();
    // SAFETY: the caller's contract; `lua_type` and `lua_tonumber` only read the slot.
    unsafe {
        if ffi::lua_type(state, idx) == ffi::LUA_TNUMBER {
            return Ok(Value::Number(ffi::lua_tonumber(state, idx)));
        }
        Value::from_stack(idx, lua)
    }
}

/// Goes through `Message::to_lua` from a `&RawLua`, which only knows how to push `IntoLua`s.
struct Built<'a>(&'a Message);

impl IntoLua for Built<'_> {
    fn into_lua(self, lua: &Lua) -> mlua::Result<Value> {
        write::build(lua, self.0)
    }
}

/// Pushing a message keeps a top-level integer a Luau integer, unlike [`Message::to_lua`].
impl IntoLua for Message {
    fn into_lua(self, lua: &Lua) -> mlua::Result<Value> {
        self.to_lua(lua)
    }

    unsafe fn push_into_stack(self, lua: &RawLua) -> mlua::Result<()> {
        // SAFETY: forwarded to the by-reference impl under the same contract.
        unsafe { (&self).push_into_stack(lua) }
    }
}

impl IntoLua for &Message {
    fn into_lua(self, lua: &Lua) -> mlua::Result<Value> {
        self.to_lua(lua)
    }

    unsafe fn push_into_stack(self, lua: &RawLua) -> mlua::Result<()> {
        // Scalars that allocate nothing are pushed straight: a protected build (a C closure
        // made and called per value) costs about 1,800 instructions, the push a dozen.
        let state = lua.state();
        match self {
            // SAFETY: mlua's contract for push_into_stack leaves one slot; this push
            // allocates nothing, so it can't raise.
            Message::Nil => unsafe {
                ffi::lua_pushnil(state);
                Ok(())
            },
            // SAFETY: mlua's contract for push_into_stack leaves one slot; this push
            // allocates nothing, so it can't raise.
            Message::Boolean(b) => unsafe {
                ffi::lua_pushboolean(state, c_int::from(*b));
                Ok(())
            },
            // SAFETY: mlua's contract for push_into_stack leaves one slot; this push
            // allocates nothing, so it can't raise.
            Message::Integer(i) => unsafe {
                ffi::lua_pushinteger64(state, *i);
                Ok(())
            },
            // SAFETY: mlua's contract for push_into_stack leaves one slot; this push
            // allocates nothing, so it can't raise.
            Message::Number(n) => unsafe {
                ffi::lua_pushnumber(state, *n);
                Ok(())
            },
            // SAFETY: mlua's contract for push_into_stack leaves one slot; this push
            // allocates nothing, so it can't raise.
            Message::Vector([x, y, z]) => unsafe {
                ffi::lua_pushvector(state, *x, *y, *z);
                Ok(())
            },
            // SAFETY: same contract; `push` builds the value under protection and pushes it.
            other => unsafe { lua.push(Built(other)) },
        }
    }
}
