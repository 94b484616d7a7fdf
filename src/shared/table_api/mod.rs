//! `jobs.shared.table`, `atomic`, `add`, `snapshot`, `revision`, `freeze`: the Luau side of
//! shared tables.
//!
//! A shared table reaches Luau as a userdata handle (`typeof` answers `SharedTable`) whose
//! metamethods give it the syntax of an ordinary table; `raw.rs` holds the handle's layout and
//! the raw C functions for the hot calls, this file the `mlua` functions behind them. The base
//! functions and the `table` library functions that take a table are wrapped (in
//! `prelude.luau`, before the sandbox closes the globals) so they accept a handle too; a plain
//! table goes straight to the builtin.
//!
//! Values cross on the Luau stack with their exact types (integer stays integer), through the
//! same reader `Message` uses, so refusals name the key path the same way.

mod args;
mod list;
mod raw;

use std::ffi::c_int;

use mlua::state::RawLua;
use mlua::{AnyUserData, Function, IntoLua, Lua, MultiValue, Table, UserData, Value};

use self::args::{refusal_what, KeyArg, TableArg, ValueArg};
use self::raw::{handle_in, new_handle, push_new_handle, SlowPaths};
use super::table::error::{amount_not_a_number, SharedTableError, SharedTableErrorKind};
use super::table::handle::Charge;
use super::table::key::{Amount, Entry, Key, KeyIn, KeyRef};
use super::table::node::{entry_message, Node};
use super::table::root::Edit;
use super::{FrozenTable, SharedStore, SharedTableRef, StoreCore};
use crate::sync::Arc;
use crate::value::path;
use crate::value::Message;
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

impl Handle {
    fn describe(&self) -> String {
        match self {
            Handle::Live(t) => format!("SharedTable({})", t.location()),
            Handle::Frozen(t) => format!("SharedTable({}, frozen)", t.location()),
        }
    }

    /// Whether two handles are the same table (`==`): the same live table, or the same frozen
    /// version.
    fn same(&self, other: &Handle) -> bool {
        match (self, other) {
            (Handle::Live(a), Handle::Live(b)) => a.same_table(b),
            (Handle::Frozen(a), Handle::Frozen(b)) => std::sync::Arc::ptr_eq(&a.node, &b.node),
            _ => false,
        }
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
            Out::Handle(h) => Ok(Value::UserData(new_handle(lua, h)?)),
        }
    }

    unsafe fn push_into_stack(self, lua: &RawLua) -> mlua::Result<()> {
        match self {
            // SAFETY: forwarded under mlua's contract for push_into_stack.
            Out::Data(m) => unsafe { m.push_into_stack(lua) },
            // SAFETY: as above; the handle's userdata is made inside a protected call.
            Out::Handle(h) => unsafe { push_new_handle(lua.state(), h) },
        }
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

/// The refusal of a yield inside `atomic`'s function.
fn atomic_yielded(location: &str) -> String {
    format!(
        "jobs.shared.atomic: the function for {location} yielded; it must return without yielding"
    )
}

fn atomic_fn_failed(location: String) -> SharedTableError {
    SharedTableError::new(
        SharedTableErrorKind::Function,
        format!("jobs.shared.atomic: the function for {location} failed"),
    )
}

/// `jobs.shared.atomic(t, key, fn)`.
fn atomic(lua: &Lua, (t, key, f): (TableArg, KeyArg, Value)) -> mlua::Result<Out> {
    const WHAT: &str = "jobs.shared.atomic";
    let handle = t.handle(WHAT)?;
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
    let result = table.atomic_entry(&KeyIn::Shared(&key), &mut |current| {
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
                return Err(mlua::Error::runtime(atomic_yielded(&at())));
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
fn add(_: &Lua, (t, key, amount): (TableArg, KeyArg, ValueArg)) -> mlua::Result<Out> {
    const WHAT: &str = "jobs.shared.add";
    let handle = t.handle(WHAT)?;
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
        lua.create_function(|_, t: TableArg| Ok(!matches!(t, TableArg::Other(_))))?,
    )?;
    p.raw_set(
        "get",
        lua.create_function(|_, (t, key): (TableArg, KeyArg)| t.handle(RAWGET)?.get(&key))?,
    )?;
    p.raw_set(
        "set",
        lua.create_function(|_, (t, key, value): (TableArg, KeyArg, ValueArg)| {
            t.handle(RAWSET)?.set(&key, &value)
        })?,
    )?;
    p.raw_set(
        "len",
        lua.create_function(|_, t: TableArg| len(t.handle(RAWLEN)?))?,
    )?;
    p.raw_set(
        "next",
        lua.create_function(|_, (t, key): (TableArg, KeyArg)| {
            let h = t.handle("next")?;
            Ok(h.with_node(|node| step_after(h, node, &key))?)
        })?,
    )?;
    p.raw_set(
        "pairs",
        lua.create_function(|lua, t: TableArg| walk(lua, t.handle("pairs")?))?,
    )?;
    p.raw_set("list", lua.create_function(list::list)?)?;
    p.raw_set("putList", lua.create_function(list::put_list)?)?;
    p.raw_set("insert", lua.create_function(list::insert)?)?;
    p.raw_set("remove", lua.create_function(list::remove)?)?;
    p.raw_set(
        "clear",
        lua.create_function(|_, t: TableArg| {
            let table = t.handle("table.clear")?.live()?;
            Ok(table
                .root
                .commit(&table.store, &table.path, |node, stamp| {
                    Ok(Edit::Write(node.cleared(stamp.rev), ()))
                })?)
        })?,
    )?;
    p.raw_set(
        "clone",
        lua.create_function(|lua, t: TableArg| {
            let h = t.handle("table.clone")?;
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

/// The names the raw accessors' refusals give.
const RAWGET: &str = "rawget";
const RAWSET: &str = "rawset";
const RAWLEN: &str = "rawlen";

/// `#t`: the table's border.
fn len(h: &Handle) -> mlua::Result<f64> {
    Ok(h.with_node(|n| n.border as f64)?)
}

/// The wrappers that let the base and `table` functions take a handle.
static TABLE_PRELUDE: Embedded = Embedded::new("=skein.shared", include_str!("prelude.luau"));

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

/// The `mlua` functions behind the raw ones: each takes every call its raw function hands over.
fn slow_paths(lua: &Lua) -> mlua::Result<SlowPaths> {
    Ok(SlowPaths {
        index: lua
            .create_function(|_, (t, key): (TableArg, KeyArg)| t.handle("index")?.get(&key))?,
        newindex: lua.create_function(|_, (t, key, value): (TableArg, KeyArg, ValueArg)| {
            t.handle("newindex")?.set(&key, &value)
        })?,
        len: lua.create_function(|_, t: TableArg| len(t.handle("len")?))?,
        add: lua.create_function(add)?,
        atomic: lua.create_function(atomic)?,
        iter: lua.create_function(|lua, t: TableArg| walk(lua, t.handle("iter")?))?,
        tostring: lua.create_function(|_, t: TableArg| Ok(t.handle("tostring")?.describe()))?,
        eq: lua.create_function(|_, (a, b): (TableArg, TableArg)| {
            Ok(match (a.handle("eq"), b.handle("eq")) {
                (Ok(a), Ok(b)) => a.same(b),
                _ => false,
            })
        })?,
        raise: raw::raiser(lua)?,
    })
}

/// Installs `jobs.shared.table`, `atomic`, `add`, `snapshot`, `revision` and `freeze`.
pub(crate) fn install(lua: &Lua, shared: &Table, store: &Arc<StoreCore>) -> mlua::Result<()> {
    lua.set_named_registry_value(HANDLES_KEY, lua.create_table()?)?;
    let made = raw::install(lua, slow_paths(lua)?)?;
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
            let cached = handles.raw_get::<Value>(&name)?;
            if handle_in(lua, &cached).is_some_and(|h| h.live().is_ok()) {
                return Ok(cached);
            }
            let table = store.table(&*name.as_bytes())?;
            let ud = Value::UserData(new_handle(lua, Handle::Live(table))?);
            handles.raw_set(name, &ud)?;
            Ok(ud)
        })?,
    )?;
    shared.raw_set("atomic", made.atomic)?;
    shared.raw_set("add", made.add)?;
    shared.raw_set(
        "revision",
        lua.create_function(|_, t: TableArg| {
            let h = t.handle("jobs.shared.revision")?;
            Ok(h.revision()? as f64)
        })?,
    )?;
    shared.raw_set(
        "snapshot",
        lua.create_function(|_, t: TableArg| {
            let h = t.handle("jobs.shared.snapshot")?;
            Ok(match h {
                Handle::Live(t) => t.snapshot()?,
                Handle::Frozen(t) => t.snapshot(),
            })
        })?,
    )?;
    shared.raw_set(
        "freeze",
        lua.create_function(|_, t: TableArg| {
            let h = t.handle("jobs.shared.freeze")?;
            Ok(Out::Handle(Handle::Frozen(match h {
                Handle::Live(t) => t.freeze()?,
                Handle::Frozen(t) => t.clone(),
            })))
        })?,
    )?;
    Ok(())
}
