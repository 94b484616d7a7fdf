//! Luau → Luau between two VMs on one thread, with no [`Message`](super::Message) in between:
//! the fast path of a cross-resource call's arguments (the caller's engine VM into the callee's).
//!
//! It takes only what both the reader ([`read`](super::read)) and a bound of `max_depth` tables
//! would let through unchanged: nil, booleans, numbers, integers, vectors, strings, buffers and
//! tables of those without metatables or cycles, keyed by strings, numbers and integers, at
//! most `max_depth` deep and weighing at most [`Limits::MAX_MESSAGE_BYTES`] all told (weighed
//! as the reader weighs, without its refunds, so never less). Anything else makes it give up
//! ([`Copied::Declined`]) without a word: it never refuses on its own, so every refusal and its
//! text stay the reader's, on the `Message` path its caller takes instead. A table is copied
//! whole at each use, as the reader copies it.
//!
//! The source is only read (`lua_type`, `to*`, `lua_rawiter`), after its caller has reserved
//! the stack; the copies are made on the target inside its caller's protected call, where an
//! allocation's memory error raises. Nothing here needs dropping, so such a raise skips no
//! destructor.

use std::ffi::{c_int, c_void};
use std::ptr;

use mlua::ffi;

use super::Limits;

/// Source stack slots one table level uses (a key and a value), plus a margin.
const SOURCE_SLOTS_PER_LEVEL: c_int = 2;
/// Target stack slots one table level uses (the table, a key and a value).
const TARGET_SLOTS_PER_LEVEL: c_int = 3;
const SLOT_MARGIN: c_int = 4;

/// The deepest nesting a copy may take: a bound below this goes the `Message` way.
pub(crate) const MAX_COPY_DEPTH: usize = 16;

/// How a copy ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Copied {
    /// Every value is on the target's stack, in order.
    All,
    /// A value the copy does not take: the target's stack holds a part of the copy (its
    /// caller drops it), and the values go the `Message` way, which refuses them or copies
    /// them.
    Declined,
}

/// The source stack slots [`copy_values`] needs beyond the values: its caller reserves them
/// (`lua_checkstack`) before the copy, outside the target's protected call.
pub(crate) const SOURCE_STACK_NEEDED: c_int =
    SOURCE_SLOTS_PER_LEVEL * (MAX_COPY_DEPTH as c_int + 1) + SLOT_MARGIN;

/// Copies the `count` values at `first..first + count` of `source` onto `target`, each
/// one table at most `max_depth` (≤ [`MAX_COPY_DEPTH`]) deep.
///
/// # Safety
/// `source` and `target` are states of two different VMs, both on this thread; the indices are
/// valid absolute indices of `source`, which has [`SOURCE_STACK_NEEDED`] free slots reserved;
/// this runs inside a protected call on `target` (an allocation there may raise).
pub(crate) unsafe fn copy_values(
    source: *mut ffi::lua_State,
    first: c_int,
    count: c_int,
    target: *mut ffi::lua_State,
    max_depth: usize,
) -> Copied {
    let mut copy = Copy {
        source,
        target,
        max_depth: max_depth.min(MAX_COPY_DEPTH),
        weight: 0,
        open: [ptr::null(); MAX_COPY_DEPTH],
        depth: 0,
    };
    let slots = TARGET_SLOTS_PER_LEVEL * (MAX_COPY_DEPTH as c_int + 1) + SLOT_MARGIN;
    // SAFETY: inside the target's protected call (caller): growing its stack may raise there.
    if unsafe { ffi::lua_checkstack(target, count.saturating_add(slots)) } == 0 {
        return Copied::Declined;
    }
    for idx in first..first.saturating_add(count) {
        // SAFETY: a valid source index (caller); the target has room for it.
        if !unsafe { copy.value(idx) } {
            return Copied::Declined;
        }
    }
    Copied::All
}

/// One copy's state: the weight so far and the source tables on the current path.
struct Copy {
    source: *mut ffi::lua_State,
    target: *mut ffi::lua_State,
    max_depth: usize,
    weight: usize,
    /// The source tables from the root to the one being copied: meeting one again is a cycle.
    open: [*const c_void; MAX_COPY_DEPTH],
    depth: usize,
}

impl Copy {
    /// Adds one node of `bytes` payload; false past the bound.
    #[inline]
    fn charge(&mut self, bytes: usize) -> bool {
        self.weight = self
            .weight
            .saturating_add(Limits::NODE_WEIGHT)
            .saturating_add(bytes);
        self.weight <= Limits::MAX_MESSAGE_BYTES
    }

    /// Pushes a copy of the source value at `idx` onto the target; false to decline.
    ///
    /// # Safety
    /// `idx` is a valid absolute source index; the target has a free slot (and the levels
    /// below reserved); inside the target's protected call.
    unsafe fn value(&mut self, idx: c_int) -> bool {
        let (source, target) = (self.source, self.target);
        // SAFETY: the contract above: the source is only read, the target pushed onto.
        unsafe {
            match ffi::lua_type(source, idx) {
                ffi::LUA_TNIL => ffi::lua_pushnil(target),
                ffi::LUA_TBOOLEAN => ffi::lua_pushboolean(target, ffi::lua_toboolean(source, idx)),
                ffi::LUA_TNUMBER => {
                    ffi::lua_pushnumber(target, ffi::lua_tonumberx(source, idx, ptr::null_mut()))
                }
                ffi::LUA_TINTEGER => ffi::lua_pushinteger64(
                    target,
                    ffi::lua_tointeger64(source, idx, ptr::null_mut()),
                ),
                ffi::LUA_TVECTOR => {
                    let v = ffi::lua_tovector(source, idx);
                    ffi::lua_pushvector(target, *v, *v.add(1), *v.add(2));
                }
                ffi::LUA_TSTRING => return self.string(idx),
                ffi::LUA_TBUFFER => {
                    let mut len = 0usize;
                    let data = ffi::lua_tobuffer(source, idx, &mut len);
                    if !self.charge(len) {
                        return false;
                    }
                    let copy = ffi::lua_newbuffer(target, len);
                    if len > 0 {
                        ptr::copy_nonoverlapping(data.cast::<u8>(), copy.cast::<u8>(), len);
                    }
                    return true;
                }
                ffi::LUA_TTABLE => return self.table(idx),
                // Functions, coroutines, userdata: the reader's to refuse (or, for a resource
                // handle, the depth check's).
                _ => return false,
            }
        }
        self.charge(0)
    }

    /// # Safety
    /// As for [`value`](Self::value), `idx` holding a table.
    unsafe fn table(&mut self, idx: c_int) -> bool {
        let (source, target) = (self.source, self.target);
        // SAFETY: idx is a table (caller); these only inspect it.
        let (has_metatable, identity, len) = unsafe {
            (
                !ffi::lua_getmetatablepointer(source, idx).is_null(),
                ffi::lua_topointer(source, idx),
                ffi::lua_rawlen(source, idx),
            )
        };
        if has_metatable
            || self.depth >= self.max_depth
            || self.open[..self.depth].contains(&identity)
            || !self.charge(0)
        {
            return false;
        }
        self.open[self.depth] = identity;
        self.depth += 1;
        // SAFETY: the source pushes a key and a value per entry into its reserved slots (the
        // depth bound keeps us within them) and pops them; the target's table, key and value
        // are within its reserved slots; allocations raise to the caller's protected call.
        let copied = unsafe {
            let mut entries: usize = 0;
            let mut iter: c_int = 0;
            loop {
                iter = ffi::lua_rawiter(source, idx, iter);
                if iter < 0 {
                    break;
                }
                ffi::lua_settop(source, -3);
                entries += 1;
            }
            let narr = c_int::try_from(len).unwrap_or(c_int::MAX);
            let nrec = c_int::try_from(entries.saturating_sub(len)).unwrap_or(c_int::MAX);
            ffi::lua_createtable(target, narr, nrec);
            self.entries(idx)
        };
        self.depth -= 1;
        copied
    }

    /// Copies the entries of the source table at `idx` into the target table on top.
    ///
    /// # Safety
    /// As for [`table`](Self::table), the copy's table on the target's top.
    unsafe fn entries(&mut self, idx: c_int) -> bool {
        let (source, target) = (self.source, self.target);
        let mut iter: c_int = 0;
        loop {
            // SAFETY: the contract of `table`.
            unsafe {
                iter = ffi::lua_rawiter(source, idx, iter);
                if iter < 0 {
                    return true;
                }
                let top = ffi::lua_gettop(source);
                let ok = self.key(top - 1) && self.value(top);
                ffi::lua_settop(source, top - 2);
                if !ok {
                    return false;
                }
                ffi::lua_rawset(target, -3);
            }
        }
    }

    /// Pushes a copy of the string at source index `idx` (a value or a key).
    ///
    /// # Safety
    /// As for [`value`](Self::value), `idx` holding a string.
    unsafe fn string(&mut self, idx: c_int) -> bool {
        let mut len = 0usize;
        // SAFETY: idx holds a string (caller): reading it neither allocates nor raises.
        let data = unsafe { ffi::lua_tolstring(self.source, idx, &mut len) };
        if !self.charge(len) {
            return false;
        }
        // SAFETY: inside the target's protected call, with a free slot (caller). The raw push:
        // mlua's wrapper reads the string back, which we don't need (`data` is never null, so
        // an empty string needs no special case).
        unsafe { ffi::lua_pushlstring_(self.target, data, len) };
        true
    }

    /// Pushes a copy of the key at source index `idx`; false for a key the reader refuses.
    ///
    /// # Safety
    /// As for [`value`](Self::value).
    unsafe fn key(&mut self, idx: c_int) -> bool {
        let (source, target) = (self.source, self.target);
        // SAFETY: the contract of `value`.
        unsafe {
            match ffi::lua_type(source, idx) {
                ffi::LUA_TNUMBER => {
                    let n = ffi::lua_tonumberx(source, idx, ptr::null_mut());
                    if n.is_nan() {
                        return false;
                    }
                    ffi::lua_pushnumber(target, n);
                }
                ffi::LUA_TINTEGER => ffi::lua_pushinteger64(
                    target,
                    ffi::lua_tointeger64(source, idx, ptr::null_mut()),
                ),
                ffi::LUA_TSTRING => return self.string(idx),
                _ => return false,
            }
        }
        self.charge(0)
    }
}

#[cfg(test)]
mod tests {
    use mlua::{ffi, Function, Lua, Value};

    use super::{copy_values, Copied, SOURCE_STACK_NEEDED};

    /// A value's contents as one string, keys sorted: equal for equal copies whatever the
    /// tables' layout.
    const CANON: &str = r#"
        local function canon(v)
            if type(v) == "buffer" then return "buffer:" .. buffer.tostring(v) end
            if type(v) ~= "table" then return typeof(v) .. ":" .. tostring(v) end
            local keys = {}
            for k in v do table.insert(keys, k) end
            table.sort(keys, function(x, y) return typeof(x) .. tostring(x) < typeof(y) .. tostring(y) end)
            local parts = {}
            for _, k in keys do table.insert(parts, canon(k) .. "=" .. canon(v[k])) end
            return "{" .. table.concat(parts, ",") .. "}"
        end
        return canon
    "#;

    /// Copies the value `code` makes in one VM into another, under `max_depth`; answers how
    /// the copy ended and, when whole, the original's and the copy's contents.
    fn copy(code: &str, max_depth: usize) -> (Copied, Option<(String, String)>) {
        let (from, to) = (Lua::new(), Lua::new());
        let value: Value = from.load(code).eval().expect("the value");
        let mut copied = Copied::Declined;
        let got = from.exec_raw_lua(|raw| {
            // SAFETY: the value is pushed onto its VM's stack, copied from its absolute index
            // into another VM inside that VM's protected call, then popped.
            unsafe {
                raw.push(&value).expect("push");
                let source = raw.state();
                let top = ffi::lua_gettop(source);
                assert!(ffi::lua_checkstack(source, SOURCE_STACK_NEEDED) != 0);
                let got = to.exec_raw::<Value>((), |target| {
                    copied = copy_values(source, top, 1, target, max_depth);
                });
                ffi::lua_settop(source, top - 1);
                got.expect("the copy")
            }
        });
        let canon = |lua: &Lua, v: Value| -> String {
            let canon: Function = lua.load(CANON).eval().expect("canon");
            canon.call(v).expect("canon of a value")
        };
        let both = (copied == Copied::All).then(|| (canon(&from, value), canon(&to, got)));
        (copied, both)
    }

    #[test]
    fn what_the_reader_takes_is_copied_whole() {
        for code in [
            "return nil",
            "return true",
            "return 1.5",
            "return integer.create(7)",
            "return vector.create(1, 2, 3)",
            "return 'text\\0with a zero'",
            "return buffer.fromstring('bytes')",
            "return {}",
            "return { 1, 2, 'three', { 4 } }",
            "return { 'a', nil, 'c' }",
            "return { x = 1.5, name = 'ada', alive = true, [2.5] = 'half', [integer.create(9)] = 9, nested = { deep = { 'yes' } } }",
            "local shared = { 1 } return { a = shared, b = shared }",
        ] {
            let (copied, both) = copy(code, 16);
            assert_eq!(copied, Copied::All, "{code}");
            let (original, copy) = both.expect("copied");
            assert_eq!(original, copy, "{code}");
        }
    }

    #[test]
    fn what_the_reader_or_the_bound_refuses_is_declined() {
        let nested =
            |n: usize| format!("local t = {{}} for _ = 2, {n} do t = {{ t }} end return t");
        assert_eq!(copy(&nested(16), 16).0, Copied::All, "at the bound");
        assert_eq!(copy(&nested(17), 16).0, Copied::Declined, "one past it");
        assert_eq!(copy(&nested(3), 2).0, Copied::Declined, "a tighter bound");
        for code in [
            "return print",
            "return { f = print }",
            "return coroutine.create(function() end)",
            "return setmetatable({}, {})",
            "local t = {} t.self = t return t",
            "return { [true] = 1 }",
            "return { [{}] = 1 }",
            "return newproxy()",
        ] {
            assert_eq!(copy(code, 16).0, Copied::Declined, "{code}");
        }
    }
}
