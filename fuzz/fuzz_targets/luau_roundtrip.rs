//! Builds a Luau value from the fuzzer's bytes through the mlua API and, beside it, the truth:
//! the `Message` it must read as, its weight, its depth, and every refusal the reader may meet
//! in it (with the path that names it). Then:
//!
//! - the read (`Message::read_within` on the value, or `FromLua` off the stack) must equal the
//!   truth, or refuse exactly where the recipe made a refusal (a function, a foreign userdata, a
//!   metatable, a cycle, a bad key, tables nested past `Limits::MAX_DEPTH`, a weight past the
//!   limit), with its text and path;
//! - the read message, built in a second VM (`Message::to_lua` or `IntoLua`) and read back, must
//!   equal the truth again;
//! - the codec must round-trip it within exactly its weight, and refuse one byte less.
//!
//! Both VMs live per thread and are reused, and no chunk is compiled: values are made through
//! the mlua API. An input leaves nothing reachable behind (the slots it uses are cleared, no
//! global is set), only garbage, which a full collection after each input takes. The VMs load no
//! library, so that collection walks a tiny heap (about 5% of an input's time); and it keeps
//! each input's mallocs and frees balanced, so libFuzzer's leak check stays cheap and on. Left to
//! the incremental collector, garbage outlives inputs, libFuzzer reruns each such input and scans
//! for leaks, and the target runs several times slower.
#![no_main]

use std::fmt::Write as _;
use std::rc::Rc;

use libfuzzer_sys::fuzz_target;
use skein::message::{DecodeErrorKind, Limits, ResourceHandle, TransferError, TransferErrorKind};
use skein::mlua::{
    self, ffi, state::RawLua, AnyUserData, Function, IntoLua, Lua, Table, UserData, Value,
};
use skein::{MapKey, Message};

/// The root name every read here uses (and the one `FromLua for Message` uses).
const ROOT: &str = "message";
/// Tables the recipe builds in one input, chains included.
const MAX_TABLES: usize = 256;
/// The recipe stops opening tables this deep (past `Limits::MAX_DEPTH`, so refusals happen).
const MAX_RECIPE_DEPTH: usize = Limits::MAX_DEPTH + 6;
/// The weight shared sub-tables may add in one input: sharing doubles, so it is bounded.
const SHARE_BUDGET: usize = 16 << 10;
/// `Message::to_lua` refuses a top-level integer past this (a `Value::Integer` goes as a number).
const MAX_EXACT_INTEGER: i64 = 1 << 53;

/// The two VMs and what each input reuses in them.
struct Vms {
    first: Lua,
    second: Lua,
    /// Holds the value at [1] so it can be read through `FromLua::from_stack`.
    first_slot: Table,
    second_slot: Table,
    /// A function value, to be refused.
    function: Function,
    /// The metatable of tables that must be refused.
    metatable: Table,
    /// A userdata that is not a `ResourceHandle`, to be refused.
    foreign: AnyUserData,
}

/// The userdata behind `Vms::foreign`.
struct Foreign;

impl UserData for Foreign {}

impl Vms {
    fn new() -> mlua::Result<Self> {
        // No libraries: nothing runs Luau code here, and a small heap keeps the per-input
        // collection cheap.
        let bare = || Lua::new_with(mlua::StdLib::NONE, mlua::LuaOptions::default());
        let (first, second) = (bare()?, bare()?);
        Ok(Vms {
            first_slot: first.create_table()?,
            second_slot: second.create_table()?,
            function: first.create_function(|_, ()| Ok(()))?,
            metatable: first.create_table()?,
            foreign: first.create_userdata(Foreign)?,
            first,
            second,
        })
    }
}

thread_local! {
    static VMS: Vms = Vms::new().expect("two VMs");
}

/// A Luau value the recipe made: a `Value`, or a Luau integer, which a `Value` can't carry into
/// Luau (mlua pushes `Value::Integer` as a number).
#[derive(Clone)]
enum Made {
    Value(Value),
    Integer(i64),
}

impl Made {
    fn into_value(self) -> Value {
        match self {
            Made::Value(v) => v,
            Made::Integer(i) => Value::Integer(i),
        }
    }
}

impl IntoLua for Made {
    fn into_lua(self, _lua: &Lua) -> mlua::Result<Value> {
        Ok(self.into_value())
    }

    unsafe fn push_into_stack(self, lua: &RawLua) -> mlua::Result<()> {
        match self {
            // SAFETY: mlua's contract leaves a free slot; this push allocates nothing.
            Made::Integer(i) => unsafe {
                ffi::lua_pushinteger64(lua.state(), i);
                Ok(())
            },
            // SAFETY: forwarded under the same contract.
            Made::Value(v) => unsafe { v.push_into_stack(lua) },
        }
    }
}

/// One step of a path, as the reader names it.
#[derive(Clone, Debug)]
enum Seg {
    Name(Vec<u8>),
    Index(i64),
    Number(f64),
    Described(String),
}

/// A refusal the reader may meet, and where.
#[derive(Clone, Debug)]
struct Site {
    kind: TransferErrorKind,
    /// Outermost first, relative to the node that holds it.
    path: Vec<Seg>,
}

/// What a value must read as. A table placed twice shares its truth (by `Rc`), so building the
/// truth copies nothing.
#[derive(Clone, Debug)]
enum Truth {
    /// Anything but a table.
    Leaf(Message),
    Table(Rc<TableTruth>),
}

#[derive(Debug)]
enum TableTruth {
    List(Vec<Truth>),
    /// Sorted by `key_order`.
    Map(Vec<(MapKey, Truth)>),
}

/// A made value and its truth.
#[derive(Clone)]
struct Node {
    made: Made,
    /// What it reads as; a placeholder (`Nil`) where it is refused.
    truth: Truth,
    /// Its `Message::queue_weight`, counted from the reference's rule as the recipe builds it:
    /// exact where nothing inside is refused, an upper bound of what a read charges otherwise.
    weight: usize,
    /// Tables on its deepest path whose depth the reader checks.
    levels: usize,
    sites: Vec<Site>,
    /// Holds a reference to a table that was open when it was made: never shared.
    cyclic: bool,
}

impl Node {
    fn plain(made: Made, truth: Message) -> Self {
        Node {
            made,
            weight: weigh_leaf(&truth),
            truth: Truth::Leaf(truth),
            levels: 0,
            sites: Vec::new(),
            cyclic: false,
        }
    }

    fn refused(made: Value, kind: TransferErrorKind) -> Self {
        Node {
            made: Made::Value(made),
            truth: Truth::Leaf(Message::Nil),
            weight: Limits::NODE_WEIGHT,
            levels: 0,
            sites: vec![Site {
                kind,
                path: Vec::new(),
            }],
            cyclic: false,
        }
    }

    fn deletes(&self) -> bool {
        matches!(self.made, Made::Value(Value::Nil))
    }
}

/// A key as Luau compares it.
#[derive(Clone, PartialEq)]
enum Key {
    Integer(i64),
    /// Never NaN, never -0.0.
    Number(u64),
    String(Vec<u8>),
    Boolean(bool),
    /// Small whole components, so bit equality is Luau's equality.
    Vector([i8; 3]),
    /// A fresh table or buffer: equal to no other key.
    Fresh(u32, &'static str),
}

impl Key {
    fn segment(&self) -> Result<Seg, (&'static str, String)> {
        match self {
            Key::Integer(i) => Ok(Seg::Index(*i)),
            Key::Number(bits) => Ok(Seg::Number(f64::from_bits(*bits))),
            Key::String(s) => Ok(Seg::Name(s.clone())),
            Key::Boolean(b) => Err(("boolean", b.to_string())),
            Key::Vector(_) => Err(("vector", "<vector key>".into())),
            Key::Fresh(_, type_name) => Err((type_name, format!("<{type_name} key>"))),
        }
    }
}

struct Entry {
    key: Key,
    node: Node,
}

/// Reads the fuzzer's bytes as a little program that builds one value.
struct Recipe<'a> {
    data: &'a [u8],
    vms: &'a Vms,
    tables: usize,
    fresh_keys: u32,
    share_budget: usize,
    /// Tables being filled, outermost first: a reference to one is a cycle.
    open: Vec<Table>,
    /// Finished tables that may be placed again elsewhere.
    done: Vec<Node>,
}

/// Names that exercise the path's quoting: identifiers, reserved words, escapes, bad UTF-8.
const NAMES: &[&[u8]] = &[
    b"a",
    b"b",
    b"x_1",
    b"_",
    b"end",
    b"nil",
    b"",
    b"a b",
    b"\"q\"",
    b"\\",
    b"\n\t\r",
    b"\x01",
    b"\xc3\xa9",
    b"\xff\xfe",
    b"1",
    b"items",
];

impl<'a> Recipe<'a> {
    fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    fn bytes(&mut self, n: usize) -> &'a [u8] {
        let n = n.min(self.data.len());
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        head
    }

    fn u64(&mut self) -> u64 {
        let mut raw = [0u8; 8];
        for b in &mut raw {
            *b = self.byte();
        }
        u64::from_le_bytes(raw)
    }

    fn lua(&self) -> &'a Lua {
        &self.vms.first
    }

    fn string(&self, bytes: &[u8]) -> Value {
        Value::String(self.lua().create_string(bytes).expect("string"))
    }

    fn value(&mut self, depth: usize) -> Node {
        let op = self.byte() % 18;
        let table_ok = depth < MAX_RECIPE_DEPTH && self.tables < MAX_TABLES;
        match op {
            0 => Node::plain(Made::Value(Value::Nil), Message::Nil),
            1 => {
                let b = self.byte() & 1 == 1;
                Node::plain(Made::Value(Value::Boolean(b)), Message::Boolean(b))
            }
            2 => {
                let n = f64::from_bits(self.u64());
                Node::plain(Made::Value(Value::Number(n)), Message::Number(n))
            }
            3 => {
                let n = f64::from(self.byte() as i8) / 2.0;
                Node::plain(Made::Value(Value::Number(n)), Message::Number(n))
            }
            4 => {
                let i = self.u64() as i64;
                Node::plain(Made::Integer(i), Message::Integer(i))
            }
            5 => {
                let i = i64::from(self.byte() as i8);
                Node::plain(Made::Integer(i), Message::Integer(i))
            }
            6 => {
                let n = usize::from(self.byte());
                let s = self.bytes(n);
                Node::plain(
                    Made::Value(self.string(s)),
                    Message::String(s.to_vec().into()),
                )
            }
            7 => {
                let s = NAMES[usize::from(self.byte()) % NAMES.len()];
                Node::plain(
                    Made::Value(self.string(s)),
                    Message::String(s.to_vec().into()),
                )
            }
            8 => {
                let mut c = || f32::from_bits(self.u64() as u32);
                let v = [c(), c(), c()];
                Node::plain(
                    Made::Value(Value::Vector(mlua::Vector::new(v[0], v[1], v[2]))),
                    Message::Vector(v),
                )
            }
            9 => {
                let n = usize::from(self.byte());
                let b = self.bytes(n);
                let buffer = self.lua().create_buffer(b).expect("buffer");
                Node::plain(
                    Made::Value(Value::Buffer(buffer)),
                    Message::Buffer(b.to_vec().into()),
                )
            }
            10 if table_ok => self.list(depth),
            11 if table_ok => self.map(depth),
            12 if table_ok => self.chain(depth),
            13 => self.reference(),
            14 => Node::refused(
                Value::Function(self.vms.function.clone()),
                TransferErrorKind::Function,
            ),
            15 if table_ok => {
                self.tables += 1;
                let t = self.lua().create_table().expect("table");
                t.set_metatable(Some(self.vms.metatable.clone()))
                    .expect("metatable");
                // The reader refuses it before it checks its depth.
                Node::refused(Value::Table(t), TransferErrorKind::Metatable)
            }
            16 => {
                let kind = NAMES[usize::from(self.byte()) % NAMES.len()];
                let handle = ResourceHandle::new(kind.to_vec(), self.u64());
                let ud = self
                    .lua()
                    .create_userdata(handle.clone())
                    .expect("userdata");
                Node::plain(Made::Value(Value::UserData(ud)), Message::Resource(handle))
            }
            17 => Node::refused(
                Value::UserData(self.vms.foreign.clone()),
                TransferErrorKind::UserData,
            ),
            _ => Node::plain(Made::Value(Value::Nil), Message::Nil),
        }
    }

    /// A table filled by `t[i] = v` for i = 1..n: a list, or a map where a value is nil.
    fn list(&mut self, depth: usize) -> Node {
        let t = self.open_table();
        let mut entries = Vec::new();
        for i in 1..=self.byte() % 8 {
            let node = self.value(depth + 1);
            self.set(&t, &mut entries, Key::Number(f64::from(i).to_bits()), node);
        }
        self.close(t, entries)
    }

    /// A table filled by `t[k] = v` in the recipe's order, keys of every kind.
    fn map(&mut self, depth: usize) -> Node {
        let t = self.open_table();
        let mut entries = Vec::new();
        for _ in 0..self.byte() % 8 {
            let Some((key, made)) = self.key() else {
                continue;
            };
            let node = self.value(depth + 1);
            self.set_made(&t, &mut entries, key, made, node);
        }
        self.close(t, entries)
    }

    /// `n` tables, each the only entry of the one outside it: a cheap way past the depth limit.
    fn chain(&mut self, depth: usize) -> Node {
        let n = usize::from(self.byte() % 72).min(MAX_TABLES.saturating_sub(self.tables));
        let use_name = self.byte() & 1 == 1;
        let mut node = self.value(MAX_RECIPE_DEPTH.min(depth + n));
        // Built directly rather than through `set` and `finish`: chains are most of the tables
        // a deep input makes, and this is the same truth for a one-entry table.
        const NEXT: &[u8] = b"next";
        let key = if use_name {
            Made::Value(self.string(NEXT))
        } else {
            Made::Value(Value::Number(1.0))
        };
        for _ in 0..n {
            self.tables += 1;
            let t = self.lua().create_table().expect("table");
            if node.deletes() {
                node = Node {
                    made: Made::Value(Value::Table(t)),
                    truth: Truth::Table(Rc::new(TableTruth::Map(Vec::new()))),
                    weight: Limits::NODE_WEIGHT,
                    levels: 1,
                    sites: Vec::new(),
                    cyclic: false,
                };
                continue;
            }
            t.raw_set(key.clone(), node.made).expect("raw_set");
            let (seg, truth, key_weight) = if use_name {
                let entry = vec![(MapKey::String(NEXT.into()), node.truth)];
                let key_weight = Limits::NODE_WEIGHT + NEXT.len();
                (Seg::Name(NEXT.to_vec()), TableTruth::Map(entry), key_weight)
            } else {
                (Seg::Index(1), TableTruth::List(vec![node.truth]), 0)
            };
            for site in &mut node.sites {
                site.path.insert(0, seg.clone());
            }
            node = Node {
                made: Made::Value(Value::Table(t)),
                truth: Truth::Table(Rc::new(truth)),
                weight: Limits::NODE_WEIGHT + key_weight + node.weight,
                levels: node.levels + 1,
                sites: node.sites,
                cyclic: node.cyclic,
            };
        }
        node
    }

    /// A finished table placed again (shared, copied once per place), or a table still being
    /// filled (a cycle).
    fn reference(&mut self) -> Node {
        let pick = usize::from(self.byte());
        if pick & 1 == 1 && !self.open.is_empty() {
            let t = self.open[(pick >> 1) % self.open.len()].clone();
            let mut node = Node::refused(Value::Table(t), TransferErrorKind::Cycle);
            node.cyclic = true;
            return node;
        }
        if self.done.is_empty() {
            return Node::plain(Made::Value(Value::Nil), Message::Nil);
        }
        let node = &self.done[(pick >> 1) % self.done.len()];
        if node.cyclic || node.weight > self.share_budget {
            return Node::plain(Made::Value(Value::Nil), Message::Nil);
        }
        self.share_budget -= node.weight;
        node.clone()
    }

    /// A key and its Luau value; `None` for a key Luau itself refuses (NaN).
    fn key(&mut self) -> Option<(Key, Made)> {
        Some(match self.byte() % 8 {
            0 => {
                let n = usize::from(self.byte() % 32);
                let s = self.bytes(n).to_vec();
                let v = self.string(&s);
                (Key::String(s), Made::Value(v))
            }
            1 => {
                let s = NAMES[usize::from(self.byte()) % NAMES.len()].to_vec();
                let v = self.string(&s);
                (Key::String(s), Made::Value(v))
            }
            2 | 3 => {
                // Small whole numbers, set in any order: lists whose keys sit in the hash part.
                let n = f64::from(self.byte() % 12);
                (Key::Number(n.to_bits()), Made::Value(Value::Number(n)))
            }
            4 => {
                let mut n = f64::from_bits(self.u64());
                if n.is_nan() {
                    return None;
                }
                if n == 0.0 {
                    // Luau finds 0.0 and -0.0 as the same key; keep one spelling.
                    n = 0.0;
                }
                (Key::Number(n.to_bits()), Made::Value(Value::Number(n)))
            }
            5 => {
                let i = i64::from(self.byte() % 12);
                (Key::Integer(i), Made::Integer(i))
            }
            6 => {
                let i = self.u64() as i64;
                (Key::Integer(i), Made::Integer(i))
            }
            _ => self.bad_key(),
        })
    }

    /// A key the reader must refuse.
    fn bad_key(&mut self) -> (Key, Made) {
        let which = self.byte();
        let lua = self.lua();
        match which % 4 {
            0 => {
                let b = which & 4 != 0;
                (Key::Boolean(b), Made::Value(Value::Boolean(b)))
            }
            1 => {
                let c = [which >> 2 & 1, which >> 3 & 1, which >> 4 & 1].map(|x| x as i8);
                let v = mlua::Vector::new(c[0].into(), c[1].into(), c[2].into());
                (Key::Vector(c), Made::Value(Value::Vector(v)))
            }
            2 => {
                self.fresh_keys += 1;
                let t = lua.create_table().expect("table");
                (
                    Key::Fresh(self.fresh_keys, "table"),
                    Made::Value(Value::Table(t)),
                )
            }
            _ => {
                self.fresh_keys += 1;
                let b = lua.create_buffer(b"").expect("buffer");
                (
                    Key::Fresh(self.fresh_keys, "buffer"),
                    Made::Value(Value::Buffer(b)),
                )
            }
        }
    }

    fn open_table(&mut self) -> Table {
        self.tables += 1;
        let t = self.lua().create_table().expect("table");
        self.open.push(t.clone());
        t
    }

    fn close(&mut self, t: Table, entries: Vec<Entry>) -> Node {
        self.open.pop();
        let node = finish(t, entries);
        self.done.push(node.clone());
        node
    }

    fn set(&mut self, t: &Table, entries: &mut Vec<Entry>, key: Key, node: Node) {
        let made = match &key {
            Key::Integer(i) => Made::Integer(*i),
            Key::Number(bits) => Made::Value(Value::Number(f64::from_bits(*bits))),
            Key::String(s) => Made::Value(self.string(s)),
            _ => unreachable!("set takes plain keys"),
        };
        self.set_made(t, entries, key, made, node);
    }

    /// `t[key] = value` in Luau, and the same in the truth: a nil deletes.
    fn set_made(&mut self, t: &Table, entries: &mut Vec<Entry>, key: Key, made: Made, node: Node) {
        t.raw_set(made, node.made.clone()).expect("raw_set");
        let at = entries.iter().position(|e| e.key == key);
        match (at, node.deletes()) {
            (Some(at), true) => {
                entries.remove(at);
            }
            (Some(at), false) => entries[at].node = node,
            (None, true) => {}
            (None, false) => entries.push(Entry { key, node }),
        }
    }
}

/// The truth of a finished table: a list when its keys are exactly the numbers 1..n, a map
/// otherwise; its weight; its refusals with the key's step in front.
fn finish(t: Table, entries: Vec<Entry>) -> Node {
    let mut sites = Vec::new();
    let mut levels = 0;
    let mut cyclic = false;
    let mut kept: Vec<(Key, Node)> = Vec::with_capacity(entries.len());
    let mut bad_keys = false;
    for Entry { key, node } in entries {
        cyclic |= node.cyclic;
        match key.segment() {
            Ok(seg) => {
                sites.extend(node.sites.iter().cloned().map(|mut s| {
                    s.path.insert(0, seg.clone());
                    s
                }));
                levels = levels.max(node.levels);
                kept.push((key, node));
            }
            Err((type_name, described)) => {
                bad_keys = true;
                sites.push(Site {
                    kind: TransferErrorKind::KeyType { type_name },
                    path: vec![Seg::Described(described)],
                });
            }
        }
    }
    let n = kept.len();
    let position = |k: &Key| match k {
        Key::Number(bits) => {
            let x = f64::from_bits(*bits);
            (x.fract() == 0.0 && x >= 1.0 && x <= n as f64).then_some(x as usize)
        }
        _ => None,
    };
    let node_weight = Limits::NODE_WEIGHT;
    let (truth, weight) = if n > 0 && kept.iter().all(|(k, _)| position(k).is_some()) {
        kept.sort_by_key(|(k, _)| position(k));
        let mut weight = kept.iter().map(|(_, v)| v.weight).sum::<usize>();
        if bad_keys {
            // The reader meets the bad key as a map's key, after it has charged the list's
            // keys: the bound counts them.
            weight += n * node_weight;
        }
        (
            TableTruth::List(kept.into_iter().map(|(_, v)| v.truth).collect()),
            weight,
        )
    } else {
        let mut weight = 0;
        let mut map: Vec<(MapKey, Truth)> = kept
            .into_iter()
            .map(|(k, v)| {
                let key = match k {
                    Key::Integer(i) => MapKey::Integer(i),
                    Key::Number(bits) => MapKey::Number(f64::from_bits(bits)),
                    Key::String(s) => {
                        weight += s.len();
                        MapKey::String(s.into())
                    }
                    _ => unreachable!("bad keys are not kept"),
                };
                weight += node_weight + v.weight;
                (key, v.truth)
            })
            .collect();
        map.sort_by(|a, b| key_order(&a.0).cmp(&key_order(&b.0)));
        (TableTruth::Map(map), weight)
    };
    Node {
        made: Made::Value(Value::Table(t)),
        truth: Truth::Table(Rc::new(truth)),
        weight: node_weight + weight,
        levels: levels + 1,
        sites,
        cyclic,
    }
}

/// The weight of a value that is not a table, from the reference's rule: a node, plus the bytes
/// of a string or buffer.
fn weigh_leaf(m: &Message) -> usize {
    Limits::NODE_WEIGHT
        + match m {
            Message::String(b) | Message::Buffer(b) => b.len(),
            Message::Resource(h) => h.kind.len(),
            _ => 0,
        }
}

/// A total order of map keys, to compare maps as sets.
fn key_order(k: &MapKey) -> (u8, u64, &[u8]) {
    match k {
        MapKey::Integer(i) => (0, *i as u64, &[]),
        MapKey::Number(n) => (1, n.to_bits(), &[]),
        MapKey::String(s) => (2, 0, s),
    }
}

/// Whether a message is its truth, compared anew: floats bit for bit, maps as sets, lists in
/// order, and a list never equal to a map (the empty table is a map, as the reader makes it).
fn same(m: &Message, truth: &Truth) -> bool {
    use Message::*;
    let table = match truth {
        Truth::Table(table) => &**table,
        Truth::Leaf(leaf) => {
            return match (m, leaf) {
                (Nil, Nil) => true,
                (Boolean(x), Boolean(y)) => x == y,
                (Integer(x), Integer(y)) => x == y,
                (Number(x), Number(y)) => x.to_bits() == y.to_bits(),
                (String(x), String(y)) | (Buffer(x), Buffer(y)) => x == y,
                (Vector(x), Vector(y)) => x.map(f32::to_bits) == y.map(f32::to_bits),
                (Resource(x), Resource(y)) => x.kind == y.kind && x.id == y.id,
                _ => false,
            }
        }
    };
    match (m, table) {
        (List(items), TableTruth::List(truths)) => {
            items.len() == truths.len() && items.iter().zip(truths).all(|(m, t)| same(m, t))
        }
        (Map(entries), TableTruth::Map(truths)) => {
            if entries.len() != truths.len() {
                return false;
            }
            let mut entries: Vec<_> = entries.iter().collect();
            entries.sort_by(|a, b| key_order(&a.0).cmp(&key_order(&b.0)));
            entries
                .iter()
                .zip(truths)
                .all(|((k, m), (tk, t))| key_order(k) == key_order(tk) && same(m, t))
        }
        _ => false,
    }
}

/// The path as the reader names it, written again from its documentation.
fn render(path: &[Seg]) -> String {
    const RESERVED: &[&str] = &[
        "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "if", "in",
        "local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while",
    ];
    let mut out = String::from(ROOT);
    for seg in path {
        match seg {
            Seg::Name(name) => {
                let identifier = name
                    .first()
                    .is_some_and(|c| c.is_ascii_alphabetic() || *c == b'_')
                    && name.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
                    && !RESERVED.iter().any(|r| r.as_bytes() == name.as_slice());
                if identifier {
                    out.push('.');
                    out.push_str(std::str::from_utf8(name).expect("ascii"));
                    continue;
                }
                out.push_str("[\"");
                for chunk in name.utf8_chunks() {
                    for c in chunk.valid().chars() {
                        match c {
                            '"' => out.push_str("\\\""),
                            '\\' => out.push_str("\\\\"),
                            '\n' => out.push_str("\\n"),
                            '\r' => out.push_str("\\r"),
                            '\t' => out.push_str("\\t"),
                            c if c.is_control() => {
                                let _ = write!(out, "\\u{{{:x}}}", c as u32);
                            }
                            c => out.push(c),
                        }
                    }
                    for b in chunk.invalid() {
                        let _ = write!(out, "\\x{b:02X}");
                    }
                }
                out.push_str("\"]");
            }
            Seg::Index(i) => {
                let _ = write!(out, "[{i}]");
            }
            Seg::Number(n) if n.fract() == 0.0 && n.abs() < 9.0e15 => {
                let _ = write!(out, "[{}]", *n as i64);
            }
            Seg::Number(n) => {
                let _ = write!(out, "[{n}]");
            }
            Seg::Described(text) => {
                let _ = write!(out, "[{text}]");
            }
        }
    }
    out
}

/// A refusal's wording, written again from the reference.
fn reason_text(kind: &TransferErrorKind) -> String {
    let cant = "can't cross a worker or event boundary";
    match kind {
        TransferErrorKind::Function => format!("a function {cant}"),
        TransferErrorKind::UserData => format!("a userdata {cant}"),
        TransferErrorKind::Metatable => format!("a table with a metatable {cant}"),
        TransferErrorKind::Cycle => format!("a table that contains itself {cant}"),
        TransferErrorKind::TooDeep { max_depth } => {
            format!("a table nested deeper than {max_depth} tables {cant}")
        }
        TransferErrorKind::KeyType { type_name } => format!("a {type_name} key {cant}"),
        TransferErrorKind::TooLarge { limit } => {
            format!("a value weighing more than its limit of {limit} bytes {cant}")
        }
        other => panic!("a refusal the recipe never makes: {other:?}"),
    }
}

/// What the truth says of a read.
struct Expected<'a> {
    root: &'a Node,
    weight: usize,
    limit: usize,
}

impl Expected<'_> {
    fn too_deep(&self) -> bool {
        self.root.levels > Limits::MAX_DEPTH
    }

    fn must_refuse(&self) -> bool {
        !self.root.sites.is_empty() || self.too_deep() || self.weight > self.limit
    }

    /// Checks a refusal against the ones the recipe made; panics on any other.
    fn check_refusal(&self, err: &TransferError) {
        assert!(
            self.must_refuse(),
            "refused what the recipe made to cross: {err}\ntruth: {:?}",
            self.root.truth
        );
        assert_eq!(
            err.to_string(),
            format!("{}: {}", err.path, reason_text(&err.reason))
        );
        assert!(err.path.starts_with(ROOT), "{err}");
        match &err.reason {
            TransferErrorKind::TooLarge { limit } => {
                assert_eq!(*limit, self.limit, "{err}");
                // The weight is exact only without other refusals; with them it is a bound.
                assert!(
                    self.weight > self.limit,
                    "refused as too large within its weight {}: {err}\ntruth: {:?}",
                    self.weight,
                    self.root.truth
                );
            }
            TransferErrorKind::TooDeep { max_depth } => {
                assert_eq!(*max_depth, Limits::MAX_DEPTH, "{err}");
                assert!(
                    self.too_deep(),
                    "refused as too deep at {} levels: {err}",
                    self.root.levels
                );
            }
            kind => assert!(
                self.root
                    .sites
                    .iter()
                    .any(|s| s.kind == *kind && render(&s.path) == err.path),
                "a refusal the recipe did not make: {err}\nmade: {:?}",
                self.root
                    .sites
                    .iter()
                    .map(|s| format!("{}: {:?}", render(&s.path), s.kind))
                    .collect::<Vec<_>>()
            ),
        }
    }
}

/// A refusal carried through `FromLua` as an external error.
fn transfer_error(err: &mlua::Error) -> &TransferError {
    match err {
        mlua::Error::ExternalError(inner) => inner
            .downcast_ref::<TransferError>()
            .unwrap_or_else(|| panic!("not a refusal: {err}")),
        other => panic!("not a refusal: {other}"),
    }
}

fn run(data: &[u8], vms: &Vms) {
    let mut recipe = Recipe {
        data,
        vms,
        tables: 0,
        fresh_keys: 0,
        share_budget: SHARE_BUDGET,
        open: Vec::new(),
        done: Vec::new(),
    };
    let mode = recipe.byte();
    let slack = recipe.byte() as i8;
    let root = recipe.value(0);
    drop(recipe);
    let weight = root.weight;
    let through_stack = mode & 1 == 1;
    // A limit at or near the weight, so both sides of the bound are met; the stack path reads
    // at the default limit.
    let limit = if !through_stack && mode & 2 == 2 {
        weight.saturating_add_signed(isize::from(slack))
    } else {
        Limits::MAX_MESSAGE_BYTES
    };
    let expected = Expected {
        root: &root,
        weight,
        limit,
    };

    let read = if through_stack {
        vms.first_slot
            .raw_set(1, root.made.clone())
            .expect("slot set");
        let read = vms.first_slot.raw_get::<Message>(1);
        vms.first_slot.raw_set(1, Value::Nil).expect("slot clear");
        read.map_err(|e| transfer_error(&e).clone())
    } else {
        Message::read_within(&root.made.clone().into_value(), ROOT, limit)
    };
    let message = match read {
        Ok(message) => message,
        Err(err) => return expected.check_refusal(&err),
    };
    assert!(
        !expected.must_refuse(),
        "read what the recipe made to be refused (weight {weight}, limit {limit}, levels {}, \
         sites {:?}): {message:?}",
        root.levels,
        root.sites
    );
    assert!(
        same(&message, &root.truth),
        "read\n  {message:?}\nbut the recipe made\n  {:?}",
        root.truth
    );
    assert_eq!(message.queue_weight(), weight, "{message:?}");

    // Into the second VM and back.
    let back = if mode & 4 == 4 {
        match (message.to_lua(&vms.second), &message) {
            (Err(mlua::Error::RuntimeError(text)), Message::Integer(i))
                if !(-MAX_EXACT_INTEGER..=MAX_EXACT_INTEGER).contains(i) =>
            {
                assert_eq!(
                    *text,
                    format!(
                        "integer {i} would be rounded as a top-level Value; pass the Message \
                         through IntoLua"
                    )
                );
                None
            }
            (Ok(_), Message::Integer(i))
                if !(-MAX_EXACT_INTEGER..=MAX_EXACT_INTEGER).contains(i) =>
            {
                panic!("to_lua must refuse the top-level integer {i}: Luau would round it")
            }
            (Ok(value), _) => Some(Message::from_lua(&value, ROOT)),
            (Err(err), _) => panic!("building {message:?} failed: {err}"),
        }
    } else {
        vms.second_slot.raw_set(1, &message).expect("build");
        let back = vms.second_slot.raw_get::<Message>(1);
        vms.second_slot.raw_set(1, Value::Nil).expect("slot clear");
        Some(back.map_err(|e| transfer_error(&e).clone()))
    };
    if let Some(back) = back {
        let back = back.unwrap_or_else(|e| panic!("a built message must read back: {e}"));
        assert!(
            same(&back, &root.truth),
            "read back\n  {back:?}\nbut the recipe made\n  {:?}",
            root.truth
        );
    }

    // The codec: within exactly its weight, and not one byte less.
    let bytes = message.to_bytes();
    let decoded = Message::decode(&bytes, weight).expect("codec round trip within its weight");
    assert!(same(&decoded, &root.truth), "decoded {decoded:?}");
    let err = Message::decode(&bytes, weight - 1).expect_err("one byte under its weight");
    assert_eq!(err.kind, DecodeErrorKind::OverLimit { limit: weight - 1 });
}

/// The one false leak `lsan.supp` explains (mlua's shared reference counts, which the reused
/// VMs and their tables keep alive across inputs), suppressed here so the plain
/// `cargo fuzz run luau_roundtrip` needs no `LSAN_OPTIONS`.
#[no_mangle]
pub extern "C" fn __lsan_default_suppressions() -> *const std::ffi::c_char {
    c"leak:mlua::types::value_ref::RefCount::clone_shared\nleak:mlua::types::value_ref::ValueRef as core::clone::Clone\n".as_ptr()
}

fuzz_target!(|data: &[u8]| {
    VMS.with(|vms| {
        run(data, vms);
        vms.first.gc_collect().expect("collect");
        vms.second.gc_collect().expect("collect");
    });
});
