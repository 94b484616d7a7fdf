//! The list operations of the `table` library on a handle: reading a run of positions, writing
//! a sorted list back, `table.insert` and `table.remove`, each one version or one commit.

use mlua::{Lua, Table};

use super::args::{TableArg, ValueArg};
use super::{Answer, Out};
use crate::shared::table::key::{Key, KeyIn};
use crate::shared::table::root::Edit;
use crate::value::Message;

/// `P.list(t, i, j)`: a plain table holding the whole-number keys `i..=j` of one version (default
/// `1..=#t`), nested tables as handles; and `#t` and the table's revision at that version.
pub(super) fn list(
    lua: &Lua,
    (t, i, j): (TableArg, Option<f64>, Option<f64>),
) -> mlua::Result<(Table, f64, f64)> {
    let h = t.handle("table.unpack")?;
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
pub(super) fn put_list(_: &Lua, (t, items, rev): (TableArg, Table, f64)) -> mlua::Result<bool> {
    let h = t.handle("table.sort")?;
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
pub(super) fn insert(
    _: &Lua,
    (t, n, a, b): (TableArg, u32, ValueArg, ValueArg),
) -> mlua::Result<()> {
    let h = t.handle("table.insert")?;
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
pub(super) fn remove(_: &Lua, (t, n, pos): (TableArg, u32, ValueArg)) -> mlua::Result<Answer> {
    let h = t.handle("table.remove")?;
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
