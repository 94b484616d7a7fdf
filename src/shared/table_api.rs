//! `jobs.shared.table`, `atomic`, `add`, `snapshot`, `revision`, `freeze`: the Luau side of
//! shared tables.
//!
//! A shared table reaches Luau as a userdata handle (`typeof` answers `SharedTable`) whose
//! metamethods give it the syntax of an ordinary table. The base functions and the `table`
//! library functions that take a table are wrapped (in `table_prelude.luau`, before the sandbox
//! closes the globals) so they accept a handle too; a plain table goes straight to the builtin.
//!
//! Values cross on the Luau stack with their exact types (integer stays integer), through the
//! same reader `Message` uses, so refusals name the key path the same way.

use std::ffi::c_int;

use bytes::Bytes;
use mlua::state::RawLua;
use mlua::{
    ffi, AnyUserData, FromLua, Function, IntoLua, Lua, MetaMethod, MultiValue, Table, UserData,
    UserDataFields, UserDataMethods, Value,
};

use super::table::error::{amount_not_a_number, SharedTableError, SharedTableErrorKind};
use super::table::handle::{bad_key, value_of, Charge};
use super::table::key::{Amount, Entry, Key, KeyIn, KeyRef};
use super::table::node::{entry_message, Node};
use super::table::root::Edit;
use super::{FrozenTable, SharedStore, SharedTableRef, StoreCore};
use crate::sync::Arc;
use crate::value::path;
use crate::value::read::{Reader, Refusal};
use crate::value::{Limits, Message, TransferErrorKind};
use crate::vm::{a_type, Embedded};

/// Registry key of this VM's handles by table name, so one name gives one userdata.
const HANDLES_KEY: &str = "skein.shared.tables";
/// Registry key of the function a generic `for` over a handle calls.
const WALK_KEY: &str = "skein.shared.walk";

/// A shared table as Luau holds it.
#[derive(Clone)]
pub(crate) enum Handle {
    Live(SharedTableRef),
    Frozen(FrozenTable),
}

impl Handle {
    fn location(&self) -> String {
        match self {
            Handle::Live(t) => t.location(),
            Handle::Frozen(t) => t.location().to_owned(),
        }
    }

    fn live(&self) -> Result<&SharedTableRef, SharedTableError> {
        match self {
            Handle::Live(t) => Ok(t),
            Handle::Frozen(t) => Err(t.refuse_write()),
        }
    }

    /// This table at one moment, and its revision then: a picture of the live table (nested
    /// tables stay live), or the frozen one.
    fn node(&self) -> Result<(std::sync::Arc<Node>, u64), SharedTableError> {
        match self {
            Handle::Live(t) => t.current_at(false),
            Handle::Frozen(t) => Ok((t.node.clone(), t.rev)),
        }
    }

    /// A copy of this table to store elsewhere: every value, nested tables too, at one moment.
    fn picture(&self) -> Result<std::sync::Arc<Node>, SharedTableError> {
        match self {
            Handle::Live(t) => Ok(t.current_at(true)?.0),
            // A copy, not the frozen tree itself: stored, its cells are written in place, and
            // the frozen table (and every other place it is stored) must not see that.
            Handle::Frozen(t) => Ok(std::sync::Arc::new(t.node.materialized(true))),
        }
    }

    fn revision(&self) -> Result<u64, SharedTableError> {
        match self {
            Handle::Live(t) => t.revision(),
            Handle::Frozen(t) => Ok(t.rev),
        }
    }

    /// Runs `f` on this table's node without keeping the version.
    fn with_node<R>(&self, f: impl FnOnce(&Node) -> R) -> Result<R, SharedTableError> {
        match self {
            Handle::Live(t) => t.with_target(f),
            Handle::Frozen(t) => Ok(f(&t.node)),
        }
    }

    /// What Luau gets for `entry`, found at `key` of this table.
    fn out(&self, key: KeyRef<'_>, entry: Option<&Entry>) -> Out {
        match entry {
            None => Out::Data(Message::Nil),
            Some(Entry::Table(node)) => Out::Handle(match self {
                Handle::Live(t) => Handle::Live(t.child(key.to_key(), node.id)),
                Handle::Frozen(t) => {
                    let mut location = t.location().to_owned();
                    let segment = [key.to_key().segment()];
                    location.push_str(&path::render("", &segment));
                    Handle::Frozen(FrozenTable {
                        location: location.into(),
                        rev: node.revision(),
                        node: node.clone(),
                        charge: t.charge.clone(),
                    })
                }
            }),
            Some(entry) => Out::Data(entry_message(entry)),
        }
    }

    fn key_location(&self, key: &Key) -> String {
        let segment = [key.segment()];
        path::render(&self.location(), &segment)
    }

    /// Reads `key`: nil for a key that can't be one, as a plain table reads.
    fn get(&self, key: &KeyArg) -> mlua::Result<Out> {
        let Some(key) = key.key_ref() else {
            return Ok(Out::Data(Message::Nil));
        };
        Ok(self.with_node(|node| self.out(key, node.get_ref(key).as_ref()))?)
    }

    /// Writes `key`; `value` nil removes it.
    fn set(&self, key: &KeyArg, value: &ValueArg) -> mlua::Result<()> {
        let table = self.live()?;
        // The key as Luau holds it: copied only if the table does not hold it yet.
        let key = key.key_in(|| self.location())?;
        let entry = value.entry(|| self.key_location(&key.as_ref().to_key()))?;
        Ok(table
            .root
            .set(&table.store, &table.path, &key, entry.as_ref())?)
    }
}

impl UserData for Handle {
    fn add_fields<F: UserDataFields<Self>>(fields: &mut F) {
        fields.add_meta_field(MetaMethod::Type.name(), "SharedTable");
    }

    fn add_methods<M: UserDataMethods<Self>>(methods: &mut M) {
        methods.add_meta_method(MetaMethod::Index, |_, this, key: KeyArg| this.get(&key));
        methods.add_meta_method(
            MetaMethod::NewIndex,
            |_, this, (key, value): (KeyArg, ValueArg)| this.set(&key, &value),
        );
        methods.add_meta_method(MetaMethod::Len, |_, this, ()| {
            Ok(this.with_node(|node| node.border as f64)?)
        });
        methods.add_meta_method(MetaMethod::Iter, |lua, this, ()| walk(lua, this));
        methods.add_meta_method(MetaMethod::ToString, |_, this, ()| {
            Ok(match this {
                Handle::Live(t) => format!("SharedTable({})", t.location()),
                Handle::Frozen(t) => format!("SharedTable({}, frozen)", t.location()),
            })
        });
        methods.add_meta_method(MetaMethod::Eq, |_, this, other: AnyUserData| {
            let Ok(other) = other.borrow::<Handle>() else {
                return Ok(false);
            };
            Ok(match (this, &*other) {
                (Handle::Live(a), Handle::Live(b)) => a.same_table(b),
                (Handle::Frozen(a), Handle::Frozen(b)) => std::sync::Arc::ptr_eq(&a.node, &b.node),
                _ => false,
            })
        });
    }
}

/// What a read hands Luau: data with its exact type, or a handle on a nested table.
enum Out {
    Data(Message),
    Handle(Handle),
}

impl IntoLua for Out {
    fn into_lua(self, lua: &Lua) -> mlua::Result<Value> {
        match self {
            Out::Data(m) => m.into_lua(lua),
            Out::Handle(h) => h.into_lua(lua),
        }
    }

    unsafe fn push_into_stack(self, lua: &RawLua) -> mlua::Result<()> {
        match self {
            // SAFETY: forwarded under mlua's contract for push_into_stack.
            Out::Data(m) => unsafe { m.push_into_stack(lua) },
            // SAFETY: as above; `push` creates the userdata and pushes it.
            Out::Handle(h) => unsafe { lua.push(h) },
        }
    }
}

/// A key as Luau gave it, read off the stack with its exact type; a key that can't be one is
/// kept as its description, so a read answers nil and a write raises naming the table.
///
/// A string key read off the stack is not copied: a read looks it up by the bytes Luau holds,
/// and only a write (or a nested table's handle) makes a key of its own.
enum KeyArg {
    Key(Key),
    /// A string's bytes as Luau holds them. Only ever made by `from_stack` for a callback's
    /// argument, which stays on the stack (and so alive and unmoved: Luau's collector does not
    /// move strings) until the callback returns; a `KeyArg` is dropped before that.
    Str(*const u8, usize),
    Bad(&'static str),
}

impl KeyArg {
    /// The key borrowed for a lookup; `None` for a value that can't be a key.
    fn key_ref(&self) -> Option<KeyRef<'_>> {
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
    fn key_in(&self, at: impl FnOnce() -> String) -> Result<KeyIn<'_>, SharedTableError> {
        match self {
            KeyArg::Key(key) => Ok(KeyIn::Shared(key)),
            KeyArg::Str(..) => match self.key_ref() {
                Some(key) => Ok(KeyIn::Bytes(key)),
                None => Err(bad_key(&at(), "a value of this type")),
            },
            KeyArg::Bad(what) => Err(bad_key(&at(), what)),
        }
    }

    fn key(&self, at: impl FnOnce() -> String) -> Result<Key, SharedTableError> {
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
        let state = lua.state();
        // SAFETY: mlua hands a valid index; these calls only read the slot.
        unsafe {
            Ok(match ffi::lua_type(state, idx) {
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
            })
        }
    }
}

/// A value as Luau gave it: data read with its exact type, a handle (copied in when stored), or
/// the refusal the reader gave, rendered once the caller knows where it was going.
enum ValueArg {
    Data(Message),
    Handle(Handle),
    Refused(Refusal),
}

impl ValueArg {
    fn entry(&self, at: impl FnOnce() -> String) -> Result<Option<Entry>, SharedTableError> {
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

fn refusal_what(kind: &TransferErrorKind) -> String {
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
    fn from_lua(value: Value, _lua: &Lua) -> mlua::Result<Self> {
        if let Value::UserData(ud) = &value {
            if let Ok(h) = ud.borrow::<Handle>() {
                return Ok(ValueArg::Handle(h.clone()));
            }
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
        // SAFETY: mlua hands a valid index; the type test only reads the slot.
        if unsafe { ffi::lua_type(state, idx) } == ffi::LUA_TUSERDATA {
            // SAFETY: as above.
            if let Value::UserData(ud) = unsafe { Value::from_stack(idx, lua)? } {
                if let Ok(h) = ud.borrow::<Handle>() {
                    return Ok(ValueArg::Handle(h.clone()));
                }
            }
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

/// The state of one loop over a handle: the table at the version the loop started on.
struct Walk {
    handle: Handle,
    node: std::sync::Arc<Node>,
    /// The picture's weight against the store's budget, for as long as the loop is kept.
    _charge: std::sync::Arc<Charge>,
}

impl UserData for Walk {}

/// `for k, v in t` and `pairs(t)`: the walk function, its state, and the first key.
fn walk(lua: &Lua, handle: &Handle) -> mlua::Result<(Function, AnyUserData, Value)> {
    let (node, _) = handle.node()?;
    let charge = match handle {
        Handle::Live(t) => t.charge(&node, false, "a loop over")?,
        Handle::Frozen(t) => t.charge.clone(),
    };
    let state = lua.create_userdata(Walk {
        handle: handle.clone(),
        node,
        _charge: charge,
    })?;
    let step: Function = lua.named_registry_value(WALK_KEY)?;
    Ok((step, state, Value::Nil))
}

/// The entry after `key` (the first for nil) in `node`, as the pair Luau's `next` answers.
fn step_after(handle: &Handle, node: &Node, key: &KeyArg) -> Answer {
    let owned;
    let from = match key {
        KeyArg::Key(k) => Some(k),
        KeyArg::Str(..) => {
            owned = key.key_ref().map(KeyRef::to_key);
            owned.as_ref()
        }
        KeyArg::Bad(_) => None,
    };
    match node.next_after(from) {
        Some((k, v)) => Answer::Pair(
            Out::Data(k.to_message()),
            handle.out(k.as_ref(), Some(&v.load())),
        ),
        None => Answer::One(Out::Data(Message::Nil)),
    }
}

/// Answers of zero, one or two values, each pushed with its exact type.
enum Answer {
    Nothing,
    One(Out),
    Pair(Out, Out),
}

impl mlua::IntoLuaMulti for Answer {
    fn into_lua_multi(self, lua: &Lua) -> mlua::Result<MultiValue> {
        match self {
            Answer::Nothing => ().into_lua_multi(lua),
            Answer::One(v) => v.into_lua_multi(lua),
            Answer::Pair(k, v) => (k, v).into_lua_multi(lua),
        }
    }

    unsafe fn push_into_stack_multi(self, lua: &RawLua) -> mlua::Result<c_int> {
        match self {
            // SAFETY: forwarded under mlua's contract for push_into_stack_multi.
            Answer::Nothing => unsafe { ().push_into_stack_multi(lua) },
            // SAFETY: as above.
            Answer::One(v) => unsafe { v.push_into_stack_multi(lua) },
            // SAFETY: as above.
            Answer::Pair(k, v) => unsafe { (k, v).push_into_stack_multi(lua) },
        }
    }
}

impl Key {
    fn to_message(&self) -> Message {
        match self {
            Key::Number(n) => Message::Number(*n),
            Key::Integer(i) => Message::Integer(*i),
            Key::String(s) => Message::String(s.clone()),
        }
    }
}

fn handle_of(value: &Value, what: &str) -> mlua::Result<Handle> {
    Ok(borrowed_handle(value, what)?.clone())
}

/// The handle `value` holds, borrowed rather than cloned (a clone counts three shared
/// references, which two workers using one table pass back and forth between their caches), or
/// the refusal naming `what`.
fn borrowed_handle(value: &Value, what: &str) -> mlua::Result<mlua::UserDataRef<Handle>> {
    match value {
        Value::UserData(ud) => ud
            .borrow::<Handle>()
            .map_err(|_| not_a_shared_table(value, what)),
        _ => Err(not_a_shared_table(value, what)),
    }
}

fn not_a_shared_table(value: &Value, what: &str) -> mlua::Error {
    mlua::Error::runtime(format!(
        "{what}: t must be a shared table, got {}",
        a_type(value)
    ))
}

/// A refusal of the call `what` (`jobs.shared.add`): its text led by the call's name, as every
/// refusal of the Luau surface is, when the table's own text does not start with it.
fn refused_by(what: &str, e: impl Into<mlua::Error>) -> mlua::Error {
    let e = e.into();
    match &e {
        mlua::Error::RuntimeError(text) if !text.starts_with(what) => {
            mlua::Error::runtime(format!("{what}: {text}"))
        }
        _ => e,
    }
}

fn atomic_fn_failed(location: String) -> SharedTableError {
    SharedTableError::new(
        SharedTableErrorKind::Function,
        format!("jobs.shared.atomic: the function for {location} failed"),
    )
}

/// `jobs.shared.atomic(t, key, fn)`.
fn atomic(lua: &Lua, (t, key, f): (Value, KeyArg, Value)) -> mlua::Result<Out> {
    const WHAT: &str = "jobs.shared.atomic";
    let handle = borrowed_handle(&t, WHAT)?;
    let table = handle.live().map_err(|e| refused_by(WHAT, e))?;
    let key = key
        .key(|| handle.location())
        .map_err(|e| refused_by(WHAT, e))?;
    let Value::Function(f) = f else {
        return Err(mlua::Error::runtime(format!(
            "{WHAT}: fn must be a function, got {}",
            a_type(&f)
        )));
    };
    let at = || handle.key_location(&key);
    let mut failure: Option<mlua::Error> = None;
    let result = table.atomic_entry(&key, &mut |current| {
        let current = current.as_ref().map_or(Message::Nil, entry_message);
        match f.call::<ValueArg>(current) {
            Ok(next) => next.entry(at),
            Err(e) => {
                failure = Some(e);
                Err(atomic_fn_failed(at()))
            }
        }
    });
    match result {
        Ok(stored) => Ok(handle.out(key.as_ref(), stored.as_ref())),
        Err(e) if e.kind() == SharedTableErrorKind::Function => {
            let e = failure.unwrap_or_else(|| e.into());
            let text = e.to_string();
            if text.contains("attempt to yield across") {
                return Err(mlua::Error::runtime(format!(
                    "jobs.shared.atomic: the function for {} yielded; it must return without yielding",
                    at()
                )));
            }
            let _ = lua;
            // The function's own error, as it raised it.
            Err(e)
        }
        Err(e) => Err(refused_by(WHAT, e)),
    }
}

/// `jobs.shared.add(t, key, amount)`: one Rust call, no Luau function to run. The amount is read
/// with its exact type (an integer stays an integer) and refused with the text
/// `SharedTableRef::add` gives.
fn add(_: &Lua, (t, key, amount): (Value, KeyArg, ValueArg)) -> mlua::Result<Out> {
    const WHAT: &str = "jobs.shared.add";
    let handle = borrowed_handle(&t, WHAT)?;
    let table = handle.live().map_err(|e| refused_by(WHAT, e))?;
    // The key as Luau holds it: copied only if the add makes it.
    let key = key
        .key_in(|| handle.location())
        .map_err(|e| refused_by(WHAT, e))?;
    let refused;
    let amount = match &amount {
        ValueArg::Data(m) => Amount::of(m),
        ValueArg::Handle(_) => Err("a shared table"),
        ValueArg::Refused(r) => {
            refused = refusal_what(&r.kind);
            Err(refused.as_str())
        }
    }
    .map_err(|what| amount_not_a_number(&handle.key_location(&key.as_ref().to_key()), what))?;
    let sum = table
        .add_entry(&key, amount)
        .map_err(|e| refused_by(WHAT, e))?;
    Ok(Out::Data(entry_message(&sum)))
}

/// The Rust primitives the prelude's wrappers call for a handle (`P` there).
fn primitives(lua: &Lua) -> mlua::Result<Table> {
    let p = lua.create_table()?;
    p.raw_set(
        "isShared",
        lua.create_function(|_, v: Value| {
            Ok(matches!(&v, Value::UserData(ud) if ud.is::<Handle>()))
        })?,
    )?;
    p.raw_set(
        "get",
        lua.create_function(|_, (t, key): (AnyUserData, KeyArg)| t.borrow::<Handle>()?.get(&key))?,
    )?;
    p.raw_set(
        "set",
        lua.create_function(|_, (t, key, value): (AnyUserData, KeyArg, ValueArg)| {
            t.borrow::<Handle>()?.set(&key, &value)
        })?,
    )?;
    p.raw_set(
        "len",
        lua.create_function(|_, t: AnyUserData| {
            Ok(t.borrow::<Handle>()?.with_node(|n| n.border as f64)?)
        })?,
    )?;
    p.raw_set(
        "next",
        lua.create_function(|_, (t, key): (AnyUserData, KeyArg)| {
            let h = t.borrow::<Handle>()?;
            Ok(h.with_node(|node| step_after(&h, node, &key))?)
        })?,
    )?;
    p.raw_set(
        "pairs",
        lua.create_function(|lua, t: AnyUserData| walk(lua, &*t.borrow::<Handle>()?))?,
    )?;
    p.raw_set("list", lua.create_function(list)?)?;
    p.raw_set("putList", lua.create_function(put_list)?)?;
    p.raw_set("insert", lua.create_function(insert)?)?;
    p.raw_set("remove", lua.create_function(remove)?)?;
    p.raw_set(
        "clear",
        lua.create_function(|_, t: AnyUserData| {
            let h = t.borrow::<Handle>()?;
            let table = h.live()?;
            Ok(table
                .root
                .commit(&table.store, &table.path, |node, stamp| {
                    Ok(Edit::Write(node.cleared(stamp.rev), ()))
                })?)
        })?,
    )?;
    p.raw_set(
        "clone",
        lua.create_function(|lua, t: AnyUserData| {
            let h = t.borrow::<Handle>()?;
            let (node, _) = h.node()?;
            let out = lua.create_table_with_capacity(node.border, node.map.len() - node.border)?;
            for (k, v) in node.map.iter() {
                out.raw_set(
                    Out::Data(k.to_message()),
                    h.out(k.as_ref(), Some(&v.load())),
                )?;
            }
            Ok(out)
        })?,
    )?;
    Ok(p)
}

/// `P.list(t, i, j)`: a plain table holding the whole-number keys `i..=j` of one version (default
/// `1..=#t`), nested tables as handles; and `#t` and the table's revision at that version.
fn list(
    lua: &Lua,
    (t, i, j): (AnyUserData, Option<f64>, Option<f64>),
) -> mlua::Result<(Table, f64, f64)> {
    let h = t.borrow::<Handle>()?;
    let (node, rev) = h.node()?;
    let first = i.unwrap_or(1.0);
    let last = j.unwrap_or(node.border as f64);
    let out = lua.create_table_with_capacity(node.border, 0)?;
    if first <= last {
        // The whole-number keys in `first..=last`: looked up one by one when there are no more
        // of them than entries, else found by one pass over the table.
        let (lo, hi) = (first.ceil(), last.floor());
        if lo <= hi && hi - lo < node.map.len() as f64 {
            let mut n = lo;
            while n <= hi {
                if let Some(key) = Key::number(n) {
                    if let Some(v) = node.get(&key) {
                        out.raw_set(Out::Data(key.to_message()), h.out(key.as_ref(), Some(&v)))?;
                    }
                }
                n += 1.0;
            }
        } else {
            for (k, v) in node.map.iter() {
                if matches!(k, Key::Number(n) if *n >= lo && *n <= hi && n.fract() == 0.0) {
                    out.raw_set(
                        Out::Data(k.to_message()),
                        h.out(k.as_ref(), Some(&v.load())),
                    )?;
                }
            }
        }
    }
    Ok((out, node.border as f64, rev as f64))
}

/// `P.putList(t, list, rev)`: writes `list[1..#list]` over positions `1..` in one commit, if the
/// table is still at `rev` (answers false, writing nothing, when it moved on).
fn put_list(_: &Lua, (t, items, rev): (AnyUserData, Table, f64)) -> mlua::Result<bool> {
    let h = t.borrow::<Handle>()?;
    let table = h.live()?;
    let n = items.raw_len();
    let mut entries = Vec::with_capacity(n);
    for i in 1..=n {
        let value: ValueArg = items.raw_get(i)?;
        let key = Key::position(i);
        entries.push((value.entry(|| h.key_location(&key))?, key));
    }
    let rev = rev as u64;
    Ok(table
        .root
        .commit(&table.store, &table.path, |node, stamp| {
            // The revision `P.list` read: the named table's count, or a nested table's own.
            let now = if table.path.keys.is_empty() {
                stamp.count
            } else {
                node.revision()
            };
            if now != rev {
                return Ok(Edit::Keep(false));
            }
            let mut next = node.clone();
            for (entry, key) in &entries {
                next = table.root.set_in(
                    &next,
                    &KeyIn::Shared(key),
                    entry.as_ref(),
                    stamp,
                    &table.path,
                )?;
            }
            Ok(Edit::Write(next, true))
        })?)
}

/// A position argument read as `luaL_checkinteger` reads it.
fn position_arg(v: &ValueArg, arg: usize, name: &str) -> mlua::Result<i64> {
    let got = match v {
        ValueArg::Data(Message::Integer(i)) => return Ok(*i),
        ValueArg::Data(Message::Number(n)) => return Ok(*n as i64),
        ValueArg::Data(Message::String(s)) => {
            if let Some(n) = std::str::from_utf8(s)
                .ok()
                .and_then(|s| s.trim().parse::<f64>().ok())
            {
                return Ok(n as i64);
            }
            "string"
        }
        ValueArg::Data(Message::Nil) => "nil",
        ValueArg::Data(Message::Boolean(_)) => "boolean",
        ValueArg::Data(Message::Vector(_)) => "vector",
        ValueArg::Data(Message::Buffer(_)) => "buffer",
        ValueArg::Data(_) => "table",
        ValueArg::Handle(_) | ValueArg::Refused(_) => "userdata",
    };
    Err(mlua::Error::runtime(format!(
        "invalid argument #{arg} to '{name}' (number expected, got {got})"
    )))
}

/// `table.insert(t, v)` / `table.insert(t, pos, v)` on a handle (`n` is how many arguments
/// followed `t`): one commit, moving elements up as Luau's own does.
fn insert(_: &Lua, (t, n, a, b): (AnyUserData, u32, ValueArg, ValueArg)) -> mlua::Result<()> {
    let h = t.borrow::<Handle>()?;
    let table = h.live()?;
    let (pos, value) = match n {
        1 => (None, &a),
        2 => (Some(position_arg(&a, 2, "insert")?), &b),
        _ => {
            return Err(mlua::Error::runtime(
                "wrong number of arguments to 'insert'",
            ))
        }
    };
    let at_key = |at: i64| Key::number(at as f64).unwrap_or(Key::Number(0.0));
    let preview = h.with_node(|node| pos.unwrap_or(node.border as i64 + 1))?;
    let entry = value.entry(|| h.key_location(&at_key(preview)))?;
    Ok(table
        .root
        .commit(&table.store, &table.path, |node, stamp| {
            let n = node.border as i64;
            let at = pos.unwrap_or(n + 1);
            let mut next = node.clone();
            if (1..=n).contains(&at) {
                for i in (at..=n).rev() {
                    let moved = next.get(&Key::position(i as usize));
                    next = next.with(Key::position(i as usize + 1), moved, stamp.rev);
                }
            }
            next = table.root.set_in(
                &next,
                &KeyIn::Owned(at_key(at)),
                entry.as_ref(),
                stamp,
                &table.path,
            )?;
            Ok(Edit::Write(next, ()))
        })?)
}

/// `table.remove(t, pos)` on a handle: one commit, moving elements down as Luau's own does;
/// answers nothing when `pos` is outside `1..=#t`.
fn remove(_: &Lua, (t, n, pos): (AnyUserData, u32, ValueArg)) -> mlua::Result<Answer> {
    let h = t.borrow::<Handle>()?;
    let table = h.live()?;
    let pos = if n >= 1 && !matches!(pos, ValueArg::Data(Message::Nil)) {
        Some(position_arg(&pos, 2, "remove")?)
    } else {
        None
    };
    let removed = table
        .root
        .commit(&table.store, &table.path, |node, stamp| {
            let n = node.border as i64;
            let at = pos.unwrap_or(n);
            if !(1..=n).contains(&at) {
                return Ok(Edit::Keep(None));
            }
            let key = Key::position(at as usize);
            let taken = node.get(&key);
            let mut next = node.clone();
            for i in at..n {
                let moved = next.get(&Key::position(i as usize + 1));
                next = next.with(Key::position(i as usize), moved, stamp.rev);
            }
            next = next.with(Key::position(n as usize), None, stamp.rev);
            Ok(Edit::Write(next, taken.map(|e| (key, e))))
        })?;
    Ok(match removed {
        Some((key, entry)) => Answer::One(h.out(key.as_ref(), Some(&entry))),
        None => Answer::Nothing,
    })
}

/// The wrappers that let the base and `table` functions take a handle.
static TABLE_PRELUDE: Embedded = Embedded::new("=skein.shared", include_str!("table_prelude.luau"));

/// Wraps the base and `table` functions so they accept handles: done when the VM is built,
/// before the sandbox makes the libraries read-only, even though the handles themselves come
/// only from [`install`]'s functions.
pub(crate) fn install_wrappers(lua: &Lua) -> mlua::Result<()> {
    lua.set_named_registry_value(
        WALK_KEY,
        lua.create_function(|_, (state, key): (AnyUserData, KeyArg)| {
            let walk = state.borrow::<Walk>()?;
            Ok(step_after(&walk.handle, &walk.node, &key))
        })?,
    )?;
    let globals: Table = TABLE_PRELUDE.load(lua)?.call(primitives(lua)?)?;
    for pair in globals.pairs::<mlua::LuaString, Function>() {
        let (name, f) = pair?;
        lua.globals().raw_set(name, f)?;
    }
    Ok(())
}

/// Installs `jobs.shared.table`, `atomic`, `add`, `snapshot`, `revision` and `freeze`.
pub(crate) fn install(lua: &Lua, shared: &Table, store: &Arc<StoreCore>) -> mlua::Result<()> {
    lua.set_named_registry_value(HANDLES_KEY, lua.create_table()?)?;
    let store = SharedStore::new(store.clone());
    shared.raw_set(
        "table",
        lua.create_function(move |lua, name: Value| {
            let name = match lua.coerce_string(name.clone())? {
                Some(name) => name,
                None => {
                    return Err(mlua::Error::runtime(format!(
                        "jobs.shared.table: name must be a string, got {}",
                        a_type(&name)
                    )))
                }
            };
            let handles: Table = lua.named_registry_value(HANDLES_KEY)?;
            if let Value::UserData(ud) = handles.raw_get::<Value>(&name)? {
                if ud.borrow::<Handle>()?.live().is_ok() {
                    return Ok(ud);
                }
            }
            let table = store.table(&*name.as_bytes())?;
            let ud = lua.create_userdata(Handle::Live(table))?;
            handles.raw_set(name, &ud)?;
            Ok(ud)
        })?,
    )?;
    shared.raw_set("atomic", lua.create_function(atomic)?)?;
    shared.raw_set("add", lua.create_function(add)?)?;
    shared.raw_set(
        "revision",
        lua.create_function(|_, t: Value| {
            let h = handle_of(&t, "jobs.shared.revision")?;
            Ok(h.revision()? as f64)
        })?,
    )?;
    shared.raw_set(
        "snapshot",
        lua.create_function(|_, t: Value| {
            let h = handle_of(&t, "jobs.shared.snapshot")?;
            Ok(match &h {
                Handle::Live(t) => t.snapshot()?,
                Handle::Frozen(t) => t.snapshot(),
            })
        })?,
    )?;
    shared.raw_set(
        "freeze",
        lua.create_function(|_, t: Value| {
            let h = handle_of(&t, "jobs.shared.freeze")?;
            Ok(Handle::Frozen(match &h {
                Handle::Live(t) => t.freeze()?,
                Handle::Frozen(t) => t.clone(),
            }))
        })?,
    )?;
    Ok(())
}
