//! Luau → `Message`: one walk over the Luau stack that copies, checks and weighs as it goes.
//!
//! The walk calls only Luau API functions that neither allocate nor raise (type tests, `to*`
//! reads, `lua_rawiter`, `lua_rawgeti`, `lua_getmetatablepointer`), after reserving all the
//! stack it can need with one `lua_checkstack`. So it may run outside a protected call, and a
//! refusal is an ordinary Rust `Err` that leaves the VM untouched.

use std::ffi::{c_int, c_void};
use std::ptr;

use bytes::Bytes;
use mlua::state::RawLua;
use mlua::{ffi, Value};

use super::path::{self, Segment};
use super::{Limits, MapKey, Message, ResourceHandle, TransferError, TransferErrorKind};

/// Stack slots one table level uses (its key and value), and a margin for a userdata probe.
const SLOTS_PER_LEVEL: c_int = 2;
const SLOT_MARGIN: c_int = 4;

/// A refusal on its way up: the segments are collected innermost first as the walk unwinds.
#[derive(Debug)]
pub(crate) struct Refusal {
    pub(crate) kind: TransferErrorKind,
    pub(crate) segments: Vec<Segment>,
}

impl Refusal {
    #[cold]
    pub(crate) fn new(kind: TransferErrorKind) -> Self {
        Refusal {
            kind,
            segments: Vec::new(),
        }
    }

    #[cold]
    fn at(mut self, segment: Segment) -> Self {
        self.segments.push(segment);
        self
    }

    pub(crate) fn into_error(self, root: &str) -> TransferError {
        TransferError {
            path: path::render(root, &self.segments),
            reason: self.kind,
        }
    }
}

/// The state of one walk: the budget and the tables on the current path.
pub(crate) struct Reader<'a> {
    state: *mut ffi::lua_State,
    /// The VM's handle, to read a resource handle (a userdata) through; `None` for a reader on
    /// a bare state, which refuses userdata (its caller reads them the slow way).
    raw: Option<&'a RawLua>,
    limit: usize,
    weight: usize,
    /// Tables from the root to the one being read: a table met again here is a cycle. A table
    /// met again elsewhere (shared by two siblings) is fine and is copied twice.
    open_tables: Vec<*const c_void>,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(raw: &'a RawLua, limit: usize) -> Self {
        Self::on(raw, raw.state(), limit)
    }

    /// A reader of another thread's stack (a coroutine of the same VM that just returned): the
    /// worker reads a job's result in place this way. A userdata met on the way is moved to
    /// `raw`'s own stack to be taken off as an mlua value.
    pub(crate) fn on(raw: &'a RawLua, state: *mut ffi::lua_State, limit: usize) -> Self {
        Reader {
            state,
            raw: Some(raw),
            limit,
            weight: 0,
            open_tables: Vec::new(),
        }
    }

    /// The stack slots one read may use: what a caller reserves ahead when the reader's own
    /// check must not grow the stack.
    pub(crate) const STACK_NEEDED: c_int =
        SLOTS_PER_LEVEL * (Limits::MAX_DEPTH as c_int + 1) + SLOT_MARGIN + 2;

    /// A reader on `state` alone, for a raw C function (mlua's current state may be another
    /// thread's): it refuses every userdata, resource handles included, with
    /// [`TransferErrorKind::UserData`], so its caller hands such values to a reader made with
    /// [`Reader::new`].
    pub(crate) fn on_state(state: *mut ffi::lua_State, limit: usize) -> Reader<'static> {
        Reader {
            state,
            raw: None,
            limit,
            weight: 0,
            open_tables: Vec::new(),
        }
    }

    /// Reads the value at stack index `idx` and restores the stack top, whatever happens.
    ///
    /// # Safety
    /// `idx` must be a valid index on the current stack of `raw`'s state.
    pub(crate) unsafe fn read_at(&mut self, idx: c_int) -> Result<Message, Refusal> {
        // SAFETY: the caller guarantees the state and index; these calls only inspect the stack.
        unsafe {
            let ty = ffi::lua_type(self.state, idx);
            if ty != ffi::LUA_TTABLE && ty != ffi::LUA_TUSERDATA {
                // A scalar, a string or a buffer: read in place, using no stack.
                return self.read_typed(ty, idx);
            }
            let top = ffi::lua_gettop(self.state);
            let idx = ffi::lua_absindex(self.state, idx);
            // Only a table's walk uses the stack below it; a userdata needs the margin for
            // its probe, so reading one never grows a small stack (a worker's coroutine).
            let slots = if ty == ffi::LUA_TTABLE {
                SLOTS_PER_LEVEL * (Limits::MAX_DEPTH as c_int + 1) + SLOT_MARGIN
            } else {
                SLOT_MARGIN
            };
            if ffi::lua_checkstack(self.state, slots) == 0 {
                // Our reservation is far below the stack's limit, so this is almost always
                // memory: not a property of the value, which may read fine a moment later.
                return Err(Refusal::new(TransferErrorKind::NoStack));
            }
            let result = self.read(idx);
            ffi::lua_settop(self.state, top);
            result
        }
    }

    /// Reserves the stack one read needs plus `extra` slots (for the values a caller pushes to
    /// read them), once for many [`Reader::read_fresh`] calls: a list of values read one by one.
    /// Answers false when Luau could not grow the stack.
    ///
    /// # Safety
    /// `raw`'s state must be the running thread of its VM, as for [`Reader::read_at`].
    pub(crate) unsafe fn reserve(&self, extra: c_int) -> bool {
        let slots = SLOTS_PER_LEVEL * (Limits::MAX_DEPTH as c_int + 1) + SLOT_MARGIN;
        // SAFETY: forwarded contract; checkstack only grows the stack.
        unsafe { ffi::lua_checkstack(self.state, slots + extra) != 0 }
    }

    /// Reads the value on top of the stack as a value of its own (its weight starts again from
    /// 0, under the same limit) and answers it with its weight, leaving the stack as it was:
    /// one of many values a caller reads one by one after one [`Reader::reserve`].
    ///
    /// # Safety
    /// The stack holds at least one value, and [`Reader::reserve`] answered true with the
    /// value's slot among its `extra` ones (nothing else pushed since but what `extra` counts).
    pub(crate) unsafe fn read_fresh(&mut self) -> Result<(Message, usize), Refusal> {
        self.weight = 0;
        // SAFETY: the top is a valid absolute index (caller), and the reserved stack is above
        // it; `read` restores nothing itself, so the top is put back after.
        unsafe {
            let top = ffi::lua_gettop(self.state);
            let result = self.read(top);
            ffi::lua_settop(self.state, top);
            result.map(|m| (m, self.weight))
        }
    }

    /// [`read_at`](Self::read_at) of a value whose type `ty` the caller has read already
    /// (a worker checks a job's result for a userdata first): a scalar, string or buffer is
    /// read in place without a second type read.
    ///
    /// # Safety
    /// As for `read_at`; `ty` is the type of the value at `idx`.
    pub(crate) unsafe fn read_typed_at(
        &mut self,
        ty: c_int,
        idx: c_int,
    ) -> Result<Message, Refusal> {
        // SAFETY: the caller's contract.
        unsafe {
            if ty != ffi::LUA_TTABLE && ty != ffi::LUA_TUSERDATA {
                return self.read_typed(ty, idx);
            }
            self.read_at(idx)
        }
    }

    /// What the walk has weighed so far: after a whole read, the value's
    /// [`queue_weight`](Message::queue_weight).
    pub(crate) fn weight(&self) -> usize {
        self.weight
    }

    /// Adds one node of `bytes` payload to the running weight, refusing past the limit.
    #[inline]
    fn charge(&mut self, bytes: usize) -> Result<(), Refusal> {
        self.weight = self
            .weight
            .saturating_add(Limits::NODE_WEIGHT)
            .saturating_add(bytes);
        if self.weight > self.limit {
            return Err(Refusal::new(TransferErrorKind::TooLarge {
                limit: self.limit,
            }));
        }
        Ok(())
    }

    /// Checks a payload size before copying it, so an oversized buffer is never copied.
    #[inline]
    fn charge_bytes(&mut self, len: usize) -> Result<(), Refusal> {
        self.charge(len)
    }

    /// # Safety
    /// `idx` is an absolute, valid index with the reserved stack available above the top.
    unsafe fn read(&mut self, idx: c_int) -> Result<Message, Refusal> {
        // SAFETY: idx is valid (caller); reading its type only reads the slot.
        unsafe { self.read_typed(ffi::lua_type(self.state, idx), idx) }
    }

    /// [`read`](Self::read) of a value whose type `ty` was read already.
    ///
    /// # Safety
    /// As for `read`; `ty` is the type of the value at `idx`.
    #[inline]
    unsafe fn read_typed(&mut self, ty: c_int, idx: c_int) -> Result<Message, Refusal> {
        let state = self.state;
        // SAFETY: idx is valid (caller); every call below only reads the value at idx.
        unsafe {
            match ty {
                ffi::LUA_TNIL => self.charge(0).map(|()| Message::Nil),
                ffi::LUA_TBOOLEAN => {
                    self.charge(0)?;
                    Ok(Message::Boolean(ffi::lua_toboolean(state, idx) != 0))
                }
                ffi::LUA_TNUMBER => {
                    self.charge(0)?;
                    Ok(Message::Number(ffi::lua_tonumberx(
                        state,
                        idx,
                        ptr::null_mut(),
                    )))
                }
                ffi::LUA_TINTEGER => {
                    self.charge(0)?;
                    Ok(Message::Integer(ffi::lua_tointeger64(
                        state,
                        idx,
                        ptr::null_mut(),
                    )))
                }
                ffi::LUA_TVECTOR => {
                    self.charge(0)?;
                    let v = ffi::lua_tovector(state, idx);
                    Ok(Message::Vector([*v, *v.add(1), *v.add(2)]))
                }
                ffi::LUA_TSTRING => {
                    let mut len = 0usize;
                    let data = ffi::lua_tolstring(state, idx, &mut len);
                    self.charge_bytes(len)?;
                    Ok(Message::String(Bytes::copy_from_slice(
                        std::slice::from_raw_parts(data.cast::<u8>(), len),
                    )))
                }
                ffi::LUA_TBUFFER => {
                    let mut len = 0usize;
                    let data = ffi::lua_tobuffer(state, idx, &mut len);
                    self.charge_bytes(len)?;
                    let bytes = if len == 0 {
                        Bytes::new()
                    } else {
                        Bytes::copy_from_slice(std::slice::from_raw_parts(data.cast::<u8>(), len))
                    };
                    Ok(Message::Buffer(bytes))
                }
                ffi::LUA_TTABLE => self.read_table(idx),
                ffi::LUA_TUSERDATA => self.read_userdata(idx),
                ffi::LUA_TFUNCTION => Err(Refusal::new(TransferErrorKind::Function)),
                ffi::LUA_TTHREAD => Err(Refusal::new(TransferErrorKind::Coroutine)),
                ffi::LUA_TLIGHTUSERDATA => Err(Refusal::new(TransferErrorKind::LightUserData)),
                _ => Err(Refusal::new(TransferErrorKind::Unsupported {
                    type_name: "value of an unknown type",
                })),
            }
        }
    }

    /// # Safety
    /// `idx` is a valid index of a userdata.
    #[cold]
    unsafe fn read_userdata(&mut self, idx: c_int) -> Result<Message, Refusal> {
        let raw = self
            .raw
            .ok_or_else(|| Refusal::new(TransferErrorKind::UserData))?;
        // SAFETY: one slot of the reserved margin holds the copy that pop_value takes off; read
        // on another thread's stack, the copy moves to `raw`'s (one slot checked there).
        let value = unsafe {
            ffi::lua_pushvalue(self.state, idx);
            let own = raw.state();
            if own != self.state {
                if ffi::lua_checkstack(own, 1) == 0 {
                    ffi::lua_pop(self.state, 1);
                    return Err(Refusal::new(TransferErrorKind::UserData));
                }
                ffi::lua_xmove(self.state, own, 1);
            }
            raw.pop_value()
        };
        let handle = match value {
            Value::UserData(ud) => ud.borrow::<ResourceHandle>().map(|h| h.clone()).ok(),
            _ => None,
        };
        let handle = handle.ok_or_else(|| Refusal::new(TransferErrorKind::UserData))?;
        self.charge(handle.kind.len())?;
        Ok(Message::Resource(handle))
    }

    /// # Safety
    /// `idx` is an absolute index of a table, with the reserved stack available.
    unsafe fn read_table(&mut self, idx: c_int) -> Result<Message, Refusal> {
        let state = self.state;
        // SAFETY: idx is a valid table index; these calls only inspect it.
        let (has_metatable, identity, len) = unsafe {
            (
                !ffi::lua_getmetatablepointer(state, idx).is_null(),
                ffi::lua_topointer(state, idx),
                ffi::lua_rawlen(state, idx),
            )
        };
        if has_metatable {
            return Err(Refusal::new(TransferErrorKind::Metatable));
        }
        if self.open_tables.contains(&identity) {
            return Err(Refusal::new(TransferErrorKind::Cycle));
        }
        if self.open_tables.len() >= Limits::MAX_DEPTH {
            return Err(Refusal::new(TransferErrorKind::TooDeep {
                max_depth: Limits::MAX_DEPTH,
            }));
        }
        self.charge(0)?;
        self.open_tables.push(identity);
        // SAFETY: same table index; the depth check above keeps us within the reserved stack.
        let result = unsafe { self.read_entries(idx, len) };
        self.open_tables.pop();
        result
    }

    /// Reads a table's entries: through the array fast path when the table can only hold the
    /// keys `1..len`, and by raw iteration otherwise.
    ///
    /// # Safety
    /// `idx` is an absolute index of a table, with two free stack slots.
    unsafe fn read_entries(&mut self, idx: c_int, len: usize) -> Result<Message, Refusal> {
        let prefix = if len > 0 {
            // SAFETY: forwarded contract.
            match unsafe { self.read_array(idx, len) }? {
                ArrayRead::List(list) => return Ok(Message::List(list)),
                ArrayRead::Hole(prefix) => prefix,
                ArrayRead::NotArray => Vec::new(),
            }
        } else {
            Vec::new()
        };
        // SAFETY: forwarded contract.
        unsafe { self.read_iterated(idx, len, prefix) }
    }

    /// The fast path for a table whose only keys are `1..len`: one `lua_rawgeti` per element
    /// and a type switch, instead of a raw iteration that pushes and checks every key.
    ///
    /// Whether other keys exist is settled first, by one `lua_rawiter` call that starts at
    /// position `len`. It visits the array slots past `len` and the hash nodes from
    /// `len - sizearray` on. When the array part holds all of `1..len` that is every other
    /// slot. When it holds fewer, the skipped hash nodes number exactly `len - sizearray`, and
    /// the keys `sizearray + 1..=len` (all present, or the walk stops at a hole) fill them, so
    /// nothing else can hide there. A table laid out otherwise takes the general path.
    ///
    /// Elements are charged and refused in index order, as the raw iteration of an array
    /// part would meet them.
    ///
    /// # Safety
    /// `idx` is an absolute index of a table, with two free stack slots.
    unsafe fn read_array(&mut self, idx: c_int, len: usize) -> Result<ArrayRead, Refusal> {
        let state = self.state;
        // `lua_objlen` answers an int, so the length fits.
        let Ok(n) = c_int::try_from(len) else {
            return Ok(ArrayRead::NotArray);
        };
        // SAFETY: idx is a table; rawiter pushes a key and a value (two free slots) only when
        // it finds an entry, and we pop them.
        unsafe {
            if ffi::lua_rawiter(state, idx, n) >= 0 {
                ffi::lua_settop(state, -3);
                return Ok(ArrayRead::NotArray);
            }
        }
        let mut list: Vec<Message> = Vec::with_capacity(len.min(self.room()));
        for i in 1..=n {
            // SAFETY: idx is a table; rawgeti pushes one value into a free slot.
            let ty = unsafe { ffi::lua_rawgeti_(state, idx, i) };
            // Numbers and integers, the bulk of large arrays, are pushed straight into the
            // list; anything else goes through the general read.
            match ty {
                ffi::LUA_TNUMBER => {
                    self.charge(0)
                        .map_err(|r| r.at(Segment::Index(i64::from(i))))?;
                    // SAFETY: the number rawgeti pushed is on top.
                    list.push(Message::Number(unsafe {
                        ffi::lua_tonumberx(state, -1, ptr::null_mut())
                    }));
                }
                ffi::LUA_TINTEGER => {
                    self.charge(0)
                        .map_err(|r| r.at(Segment::Index(i64::from(i))))?;
                    // SAFETY: the integer rawgeti pushed is on top.
                    list.push(Message::Integer(unsafe {
                        ffi::lua_tointeger64(state, -1, ptr::null_mut())
                    }));
                }
                ffi::LUA_TNIL => {
                    // SAFETY: pops the nil rawgeti pushed.
                    unsafe { ffi::lua_settop(state, -2) };
                    return Ok(ArrayRead::Hole(list));
                }
                _ => {
                    // SAFETY: the value is on top, an absolute index; the slot above it is free.
                    let item = unsafe { self.read(ffi::lua_gettop(state)) }
                        .map_err(|r| r.at(Segment::Index(i64::from(i))))?;
                    list.push(item);
                }
            }
            // SAFETY: pops the value rawgeti pushed.
            unsafe { ffi::lua_settop(state, -2) };
        }
        Ok(ArrayRead::List(list))
    }

    /// How many more nodes the budget allows, plus one: a huge table under a tiny limit must
    /// not reserve room for all of it.
    fn room(&self) -> usize {
        (self.limit.saturating_sub(self.weight) / Limits::NODE_WEIGHT).saturating_add(1)
    }

    /// Reads every entry in Luau's raw iteration order (array part first), staying a list while
    /// the keys run 1, 2, 3… and turning into a map at the first key that breaks the run.
    ///
    /// `prefix` holds the values of keys `1..=prefix.len()`, already read and charged by the
    /// fast path before it met a hole; they are taken from it rather than read twice (reading
    /// twice would double the work at every nested level).
    ///
    /// # Safety
    /// `idx` is an absolute index of a table, with two free stack slots.
    unsafe fn read_iterated(
        &mut self,
        idx: c_int,
        len: usize,
        mut prefix: Vec<Message>,
    ) -> Result<Message, Refusal> {
        let state = self.state;
        let mut list: Vec<Message> = Vec::with_capacity(len.min(self.room()));
        let mut map: Vec<(MapKey, Message)> = Vec::new();
        let mut is_list = len > 0;
        let mut iter: c_int = 0;
        loop {
            // SAFETY: idx is a table; rawiter pushes a key and a value (two reserved slots).
            iter = unsafe { ffi::lua_rawiter(state, idx, iter) };
            if iter < 0 {
                break;
            }
            // SAFETY: the key and value are the top two slots.
            let top = unsafe { ffi::lua_gettop(state) };
            let (key_idx, value_idx) = (top - 1, top);
            if is_list {
                // SAFETY: key_idx is valid.
                let next = unsafe {
                    (ffi::lua_type(state, key_idx) == ffi::LUA_TNUMBER)
                        .then(|| ffi::lua_tonumberx(state, key_idx, ptr::null_mut()))
                };
                if next == Some((list.len() + 1) as f64) {
                    let at = list.len();
                    let value = match prefix.get_mut(at) {
                        Some(kept) => Ok(std::mem::replace(kept, Message::Nil)),
                        // SAFETY: value_idx is valid.
                        None => unsafe { self.read(value_idx) },
                    };
                    list.push(value.map_err(|r| r.at(Segment::Index(at as i64 + 1)))?);
                    // SAFETY: pops the key and value rawiter pushed.
                    unsafe { ffi::lua_settop(state, top - 2) };
                    continue;
                }
                is_list = false;
                self.list_to_map(&mut list, &mut map)?;
            }
            // SAFETY: key_idx is valid.
            let key = unsafe { self.read_key(key_idx) }?;
            let value = match prefix_slot(&key, prefix.len()) {
                Some(at) => Ok(std::mem::replace(&mut prefix[at], Message::Nil)),
                // SAFETY: value_idx is valid; on failure the key is still in place to name it.
                None => unsafe { self.read(value_idx) },
            };
            let value = value.map_err(|r| r.at(key_segment(&key)))?;
            map.push((key, value));
            // SAFETY: pops the key and value rawiter pushed.
            unsafe { ffi::lua_settop(state, top - 2) };
        }
        if is_list && !list.is_empty() {
            return Ok(Message::List(list));
        }
        Ok(self.list_shaped(map))
    }

    /// Moves the list read so far into the map, charging the keys it now needs.
    #[cold]
    fn list_to_map(
        &mut self,
        list: &mut Vec<Message>,
        map: &mut Vec<(MapKey, Message)>,
    ) -> Result<(), Refusal> {
        for _ in 0..list.len() {
            self.charge(0)?;
        }
        map.reserve(list.len());
        map.extend(
            list.drain(..)
                .enumerate()
                .map(|(i, m)| (MapKey::Number((i + 1) as f64), m)),
        );
        Ok(())
    }

    /// A map whose keys are exactly the numbers 1..n is a list that Luau iterated out of order
    /// (its keys live in the hash part): give it its canonical form and refund its keys.
    fn list_shaped(&mut self, mut map: Vec<(MapKey, Message)>) -> Message {
        let n = map.len();
        let in_range = |k: &MapKey| match k {
            MapKey::Number(x) => x.fract() == 0.0 && *x >= 1.0 && *x <= n as f64,
            _ => false,
        };
        if n == 0 || !map.iter().all(|(k, _)| in_range(k)) {
            return Message::Map(map);
        }
        // Luau keys are distinct, so n distinct keys in 1..=n are exactly 1..=n.
        map.sort_unstable_by(|a, b| a.0.sort_key_number().total_cmp(&b.0.sort_key_number()));
        self.weight = self
            .weight
            .saturating_sub(n.saturating_mul(Limits::NODE_WEIGHT));
        Message::List(map.into_iter().map(|(_, v)| v).collect())
    }

    /// # Safety
    /// `idx` is a valid index.
    unsafe fn read_key(&mut self, idx: c_int) -> Result<MapKey, Refusal> {
        let state = self.state;
        // SAFETY: idx is valid; only reads.
        unsafe {
            match ffi::lua_type(state, idx) {
                ffi::LUA_TNUMBER => {
                    let n = ffi::lua_tonumberx(state, idx, ptr::null_mut());
                    if n.is_nan() {
                        return Err(Refusal::new(TransferErrorKind::NanKey)
                            .at(Segment::Described("nan".into())));
                    }
                    self.charge(0)?;
                    Ok(MapKey::Number(n))
                }
                ffi::LUA_TINTEGER => {
                    self.charge(0)?;
                    Ok(MapKey::Integer(ffi::lua_tointeger64(
                        state,
                        idx,
                        ptr::null_mut(),
                    )))
                }
                ffi::LUA_TSTRING => {
                    let mut len = 0usize;
                    let data = ffi::lua_tolstring(state, idx, &mut len);
                    self.charge_bytes(len)?;
                    Ok(MapKey::String(Bytes::copy_from_slice(
                        std::slice::from_raw_parts(data.cast::<u8>(), len),
                    )))
                }
                other => Err(bad_key(state, idx, other)),
            }
        }
    }
}

impl MapKey {
    fn sort_key_number(&self) -> f64 {
        match self {
            MapKey::Number(n) => *n,
            _ => f64::NAN,
        }
    }
}

/// What the fast path found in a table.
enum ArrayRead {
    /// Keys exactly `1..len`: the whole list.
    List(Vec<Message>),
    /// A nil inside `1..len`: the values before it, to be reused by the general path.
    Hole(Vec<Message>),
    /// Keys outside `1..len`, or a layout the fast path can't vouch for: nothing read.
    NotArray,
}

/// The position in a fast-path prefix of `len` values that `key` names, if it names one.
fn prefix_slot(key: &MapKey, len: usize) -> Option<usize> {
    match key {
        MapKey::Number(n) if n.fract() == 0.0 && *n >= 1.0 && *n <= len as f64 => {
            Some(*n as usize - 1)
        }
        _ => None,
    }
}

fn key_segment(key: &MapKey) -> Segment {
    match key {
        MapKey::Integer(i) => Segment::Index(*i),
        MapKey::Number(n) => Segment::Number(*n),
        MapKey::String(s) => Segment::Name(s.to_vec()),
    }
}

/// The refusal for a key of type `ty`, with a segment that names it.
///
/// # Safety
/// `idx` is a valid index holding a value of type `ty`.
#[cold]
unsafe fn bad_key(state: *mut ffi::lua_State, idx: c_int, ty: c_int) -> Refusal {
    let type_name = type_name(ty);
    let described = if ty == ffi::LUA_TBOOLEAN {
        // SAFETY: idx is valid.
        let b = unsafe { ffi::lua_toboolean(state, idx) } != 0;
        b.to_string()
    } else {
        format!("<{type_name} key>")
    };
    Refusal::new(TransferErrorKind::KeyType { type_name }).at(Segment::Described(described))
}

/// Luau's name for a type tag, in the words the refusals use.
fn type_name(ty: c_int) -> &'static str {
    match ty {
        ffi::LUA_TNIL => "nil",
        ffi::LUA_TBOOLEAN => "boolean",
        ffi::LUA_TLIGHTUSERDATA => "light userdata",
        ffi::LUA_TNUMBER => "number",
        ffi::LUA_TINTEGER => "integer",
        ffi::LUA_TVECTOR => "vector",
        ffi::LUA_TSTRING => "string",
        ffi::LUA_TTABLE => "table",
        ffi::LUA_TFUNCTION => "function",
        ffi::LUA_TUSERDATA => "userdata",
        ffi::LUA_TTHREAD => "coroutine",
        ffi::LUA_TBUFFER => "buffer",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use mlua::{ffi, Lua, Value};

    use super::Reader;
    use crate::value::{Limits, MapKey, Message, TransferErrorKind};

    fn read(lua: &Lua, code: &str) -> Message {
        let value: Value = lua.load(code).eval().expect("eval");
        Message::from_lua(&value, "m").expect("read")
    }

    fn numbers(range: std::ops::RangeInclusive<i64>) -> Vec<Message> {
        range.map(|i| Message::Number(i as f64)).collect()
    }

    #[test]
    fn a_table_read_where_the_stack_cannot_grow_is_refused_as_no_stack_and_the_stack_is_kept() {
        // Luau refuses to grow a C function's stack past LUAI_MAXCSTACK slots (1,000,000 as
        // mlua builds it): fill this one to within the reader's reservation of the limit (the
        // same refusal a VM out of memory gives; 16 MB of stack) and read a table.
        let lua = Lua::new();
        let (refusal, scalar, top_kept) = lua.exec_raw_lua(|raw| {
            // SAFETY: the stack is grown with checkstack before each push and reset after.
            unsafe {
                let state = raw.state();
                let base = ffi::lua_gettop(state);
                // Ten slots short of the limit: far fewer than one read reserves.
                let fill = 1_000_000 - 10 - base;
                assert!(ffi::lua_checkstack(state, fill + 1) != 0);
                for _ in 0..fill - 1 {
                    ffi::lua_pushnil(state);
                }
                ffi::lua_createtable(state, 0, 0);
                let top = ffi::lua_gettop(state);
                let refusal = Reader::new(raw, Limits::MAX_MESSAGE_BYTES)
                    .read_at(-1)
                    .err();
                let top_kept = ffi::lua_gettop(state) == top;
                // A scalar needs no stack and still reads.
                ffi::lua_pushinteger(state, 7);
                let scalar = Reader::new(raw, Limits::MAX_MESSAGE_BYTES).read_at(-1).ok();
                ffi::lua_settop(state, base);
                (refusal.map(|r| r.kind), scalar, top_kept)
            }
        });
        assert_eq!(refusal, Some(TransferErrorKind::NoStack));
        assert_eq!(
            TransferErrorKind::NoStack.to_string(),
            "a value can't be read while its VM can't grow its stack (out of memory, or near the \
             stack's limit)"
        );
        assert_eq!(scalar, Some(Message::Number(7.0)));
        assert!(top_kept);
    }

    #[test]
    fn a_pure_array_keeps_order_and_element_types() {
        let lua = Lua::new();
        let m = read(&lua, "{ 1.5, 2, integer.create(3), 'x', { 0 } }");
        let Message::List(items) = m else {
            panic!("expected a list, got {m:?}")
        };
        assert_eq!(items.len(), 5);
        assert!(matches!(items[0], Message::Number(n) if n == 1.5));
        assert!(matches!(items[1], Message::Number(n) if n == 2.0));
        assert!(matches!(items[2], Message::Integer(3)));
        assert_eq!(items[3], Message::String("x".into()));
        assert_eq!(items[4], Message::List(vec![Message::Number(0.0)]));
    }

    #[test]
    fn an_array_with_extra_keys_becomes_a_map() {
        let lua = Lua::new();
        let m = read(
            &lua,
            "local t = { 10, 20, 30 } t.x = true t[5] = 50 return t",
        );
        let expected = Message::Map(vec![
            (MapKey::Number(1.0), Message::Number(10.0)),
            (MapKey::Number(2.0), Message::Number(20.0)),
            (MapKey::Number(3.0), Message::Number(30.0)),
            (MapKey::Number(5.0), Message::Number(50.0)),
            (MapKey::String("x".into()), Message::Boolean(true)),
        ]);
        assert_eq!(m, expected);
    }

    /// Keys 1..n written as a record live in the hash part, where the fast path's one-call
    /// check must still see any other key.
    #[test]
    fn hash_part_arrays_with_and_without_an_extra_key() {
        let lua = Lua::new();
        for n in 1..=40i64 {
            let fields: String = (1..=n).map(|i| format!("[{i}] = {i}, ")).collect();
            let pure = read(&lua, &format!("{{ {fields} }}"));
            assert_eq!(pure, Message::List(numbers(1..=n)), "n = {n}");
            for extra in [
                "x = 0",
                "[0] = 0",
                "[-1] = 0",
                "[0.5] = 0",
                "[integer.create(1)] = 0",
            ] {
                let mixed = read(&lua, &format!("{{ {fields} {extra} }}"));
                let Message::Map(entries) = &mixed else {
                    panic!("n = {n}, {extra}: expected a map, got {mixed:?}")
                };
                assert_eq!(entries.len() as i64, n + 1, "n = {n}, {extra}");
            }
        }
    }

    #[test]
    fn a_hole_makes_a_map_of_the_present_keys() {
        let lua = Lua::new();
        let m = read(&lua, "{ 'a', nil, 'c' }");
        let expected = Message::Map(vec![
            (MapKey::Number(1.0), Message::String("a".into())),
            (MapKey::Number(3.0), Message::String("c".into())),
        ]);
        assert_eq!(m, expected);
        let m = read(&lua, "local t = table.create(8, 1) t[4] = nil return t");
        let Message::Map(entries) = m else {
            panic!("expected a map")
        };
        assert_eq!(entries.len(), 7);
    }

    /// A hole after a nested table must not read that table twice per level: 60 levels would
    /// take 2^60 reads.
    #[test]
    fn nested_holes_are_read_once() {
        let lua = Lua::new();
        let m = read(
            &lua,
            "local t = { 1 } for _ = 1, 60 do t = { t, nil, 2 } end return t",
        );
        let mut depth = 0;
        let mut at = &m;
        while let Message::Map(entries) = at {
            assert_eq!(entries.len(), 2);
            let inner = entries
                .iter()
                .find(|(k, _)| *k == MapKey::Number(1.0))
                .expect("key 1");
            at = &inner.1;
            depth += 1;
        }
        assert_eq!(depth, 60);
        assert_eq!(at, &Message::List(vec![Message::Number(1.0)]));
    }

    #[test]
    fn a_refusal_in_an_array_names_its_index() {
        let lua = Lua::new();
        let value: Value = lua
            .load("local t = table.create(5, 0) t[4] = print return t")
            .eval()
            .unwrap();
        let err = Message::from_lua(&value, "m").unwrap_err();
        assert_eq!(
            err.to_string(),
            "m[4]: a function can't cross a worker or event boundary"
        );
    }

    #[test]
    fn an_array_is_charged_per_element_and_refused_one_byte_past() {
        let lua = Lua::new();
        let value: Value = lua.load("{ 1, 2, 3, 4 }").eval().unwrap();
        let exact = 5 * Limits::NODE_WEIGHT;
        assert_eq!(
            Message::read_within(&value, "m", exact).unwrap(),
            Message::List(numbers(1..=4))
        );
        let err = Message::read_within(&value, "m", exact - 1).unwrap_err();
        assert!(err.to_string().starts_with("m[4]: "), "{err}");
    }

    #[test]
    fn every_default_copy_is_bounded_at_max_message_bytes_and_refused_one_past() {
        use crate::value::{Limits, TransferErrorKind};
        let lua = Lua::new();
        // One list node, one string node and its bytes: exactly the bound, then one byte more.
        let fits = Limits::MAX_MESSAGE_BYTES - 2 * Limits::NODE_WEIGHT;
        let make = |len: usize| -> Value {
            lua.load(format!("return {{ string.rep('x', {len}) }}"))
                .eval()
                .unwrap()
        };
        let at = Message::from_lua(&make(fits), "m").unwrap();
        assert_eq!(at.queue_weight(), Limits::MAX_MESSAGE_BYTES);
        let err = Message::from_lua(&make(fits + 1), "m").unwrap_err();
        assert_eq!(
            err.reason,
            TransferErrorKind::TooLarge {
                limit: Limits::MAX_MESSAGE_BYTES
            }
        );
        assert_eq!(
            err.to_string(),
            "m[1]: a value weighing more than its limit of 67108864 bytes can't cross a worker \
             or event boundary"
        );
        // A table whose sub-table is shared is weighed per use: 2^26 leaves are refused after
        // the bound's worth of nodes, not expanded.
        let bomb: Value = lua
            .load("local t = {'leaf'} for i = 1, 26 do t = {t, t} end return t")
            .eval()
            .unwrap();
        let err = Message::from_lua(&bomb, "m").unwrap_err();
        assert_eq!(
            err.reason,
            TransferErrorKind::TooLarge {
                limit: Limits::MAX_MESSAGE_BYTES
            }
        );
    }

    #[test]
    fn slots_are_read_each_under_its_own_bound_with_nil_for_an_empty_one() {
        let lua = Lua::new();
        let half = Limits::MAX_MESSAGE_BYTES / 2;
        let table: mlua::Table = lua
            .load(format!(
                "local t = table.create(4) t[1] = string.rep('a', {half}) \
                 t[2] = string.rep('b', {half}) t[4] = {{ 1 }} return t"
            ))
            .eval()
            .unwrap();
        // Together past one copy's bound, each within it; slot 3 is empty.
        let (slots, weight) = Message::read_slots(&table, 4, "result").unwrap();
        assert_eq!(slots.len(), 4);
        assert!(matches!(&slots[2], Message::Nil));
        assert_eq!(slots[3].queue_weight(), 2 * Limits::NODE_WEIGHT);
        assert_eq!(
            weight,
            2 * (half + Limits::NODE_WEIGHT) + 3 * Limits::NODE_WEIGHT,
            "the total weight is every slot's"
        );
        let past: mlua::Table = lua
            .load(format!(
                "return {{ 1, string.rep('c', {}), print }}",
                Limits::MAX_MESSAGE_BYTES - Limits::NODE_WEIGHT + 1
            ))
            .eval()
            .unwrap();
        let (slot, err) = Message::read_slots(&past, 3, "result").unwrap_err();
        assert_eq!(slot, 2, "the first refused slot is named");
        assert_eq!(
            err.to_string(),
            "result: a value weighing more than its limit of 67108864 bytes can't cross a worker \
             or event boundary"
        );
        // Only the slots asked for are read.
        let (first, _) = Message::read_slots(&past, 1, "result").unwrap();
        assert!(matches!(first[..], [Message::Number(n)] if n == 1.0));
        let bad: mlua::Table = lua.load("return { 1, print }").eval().unwrap();
        let (slot, err) = Message::read_slots(&bad, 2, "result").unwrap_err();
        assert_eq!(slot, 2);
        assert_eq!(
            err.to_string(),
            "result: a function can't cross a worker or event boundary"
        );
    }
}
