//! Luau → `Message`: one walk over the Luau stack that copies, checks and weighs as it goes.
//!
//! The walk calls only Luau API functions that neither allocate nor raise (type tests, `to*`
//! reads, `lua_rawiter`, `lua_getmetatablepointer`), after reserving all the stack it can need
//! with one `lua_checkstack`. So it may run outside a protected call, and a refusal is an
//! ordinary Rust `Err` that leaves the VM untouched.

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
    raw: &'a RawLua,
    limit: usize,
    weight: usize,
    /// Tables from the root to the one being read: a table met again here is a cycle. A table
    /// met again elsewhere (shared by two siblings) is fine and is copied twice.
    open_tables: Vec<*const c_void>,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(raw: &'a RawLua, limit: usize) -> Self {
        Reader {
            state: raw.state(),
            raw,
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
            let top = ffi::lua_gettop(self.state);
            let idx = ffi::lua_absindex(self.state, idx);
            let slots = SLOTS_PER_LEVEL * (Limits::MAX_DEPTH as c_int + 1) + SLOT_MARGIN;
            if ffi::lua_checkstack(self.state, slots) == 0 {
                return Err(Refusal::new(TransferErrorKind::TooDeep {
                    max_depth: Limits::MAX_DEPTH,
                }));
            }
            let result = self.read(idx);
            ffi::lua_settop(self.state, top);
            result
        }
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
        let state = self.state;
        // SAFETY: idx is valid (caller); every call below only reads the value at idx.
        unsafe {
            match ffi::lua_type(state, idx) {
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
        // SAFETY: one slot of the reserved margin holds the copy that pop_value takes off.
        let value = unsafe {
            ffi::lua_pushvalue(self.state, idx);
            self.raw.pop_value()
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

    /// Reads every entry in Luau's raw iteration order (array part first), staying a list while
    /// the keys run 1, 2, 3… and turning into a map at the first key that breaks the run.
    ///
    /// # Safety
    /// `idx` is an absolute index of a table, with two free stack slots.
    unsafe fn read_entries(&mut self, idx: c_int, len: usize) -> Result<Message, Refusal> {
        let state = self.state;
        // Never reserve more than the budget could fill: a huge table under a tiny limit must
        // not allocate for all of it.
        let room = (self.limit.saturating_sub(self.weight) / Limits::NODE_WEIGHT).saturating_add(1);
        let mut list: Vec<Message> = Vec::with_capacity(len.min(room));
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
                    // SAFETY: value_idx is valid.
                    let value = unsafe { self.read(value_idx) }
                        .map_err(|r| r.at(Segment::Index(list.len() as i64 + 1)))?;
                    list.push(value);
                    // SAFETY: pops the key and value rawiter pushed.
                    unsafe { ffi::lua_settop(state, top - 2) };
                    continue;
                }
                is_list = false;
                self.list_to_map(&mut list, &mut map)?;
            }
            // SAFETY: key_idx is valid.
            let key = unsafe { self.read_key(key_idx) }?;
            // SAFETY: value_idx is valid; on failure the key is still in place to name it.
            let value = unsafe { self.read(value_idx) }.map_err(|r| r.at(key_segment(&key)))?;
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
