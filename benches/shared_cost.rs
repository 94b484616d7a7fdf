//! A driver for counting instructions (not a timed benchmark): runs one shared-table operation N
//! times on a 1,000-key table built as `benches/shared_native.rs` builds its own (string keys
//! `key0`.. over static bytes, integer values), so `valgrind --tool=callgrind` can count what one
//! operation costs. Run it at two counts and divide the difference, so set-up cancels out:
//!
//! ```text
//! for n in 10000 20000; do
//!     valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file=cg.get.$n.%p \
//!         target/release/deps/shared_cost-* get $n
//! done
//! ```
//!
//! `--separate-threads=yes` writes one file per thread; every operation runs on the calling
//! thread, `-01` (the one pool worker only sleeps). Subtract that file's `totals:` between the two
//! runs and divide by 10,000: the pool, the domain and the table are built in both runs, so they
//! cancel out, and the loop's own few instructions stay in the figure.
//!
//! Modes, each on the table `hot`:
//! - `get N`: `SharedTableRef::get` of the keys in turn, each answering an integer;
//! - `get_arcswap N` and `get_rwlock N`: the same gets from a `HashMap<String, Message>` behind
//!   an `ArcSwap` (one `load` a get, as Skein loads a version) and behind a `RwLock`, as
//!   `shared_native`'s baselines read it;
//! - `set N`: `set` of the keys in turn to another integer (the key exists: no growth);
//! - `atomic N`: an uncontended `atomic` increment of one key;
//! - `add N`: an uncontended `add(key, 1)` of the same key: the numeric fast path;
//! - `luau N`: `s += t.x` in a Luau loop on the engine VM (`t = jobs.shared.table("hot")`): a
//!   read of a shared table from Luau, with the loop's bytecode in the figure;
//! - `luau_plus N`, `luau_atomic N` and `luau_add N`: the three increments `benches/shared_luau.rs`
//!   times from 2 workers, here in one loop on the engine VM with nobody contending: `t.x += 1`,
//!   `jobs.shared.atomic(t, "x", inc)` and `jobs.shared.add(t, "x", 1)`. Where the build has no
//!   `jobs.shared.add` (before its Luau side), `luau_add` prints a note and exits with status 2;
//!   the smoke run skips it with the note;
//! - `write_big N` and `write_small N`: `set` of one integer key of a 1,000,000-entry and of a
//!   10-entry table, each stored at `data` of its own named table and written through
//!   `table_at`, as `benches/shared_big.rs` writes them: the write copies the path to the key,
//!   so the big write's count over the small one's is how the cost grows with the table's depth.
//!   Building the 1M-entry table costs over a billion instructions, and the hash seed (new each
//!   run) moves that by hundreds of millions, so these two are not differenced: count only the
//!   writes, and divide by N:
//!
//! ```text
//! valgrind --tool=callgrind --toggle-collect='shared_cost::writes' \
//!     --callgrind-out-file=cg.write_big.%p target/release/deps/shared_cost-* write_big 10000
//! ```
//!
//!   The seed also sets how deep a key sits, so `set`, `atomic` and these two move from run to
//!   run: run each a few times.
//!
//! `cargo bench --bench shared_cost` runs each mode once with 10,000 and prints wall time, as a
//! smoke test.

mod util;

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::RwLock;
use std::time::Instant;

use arc_swap::ArcSwap;

use skein::shared::SharedTableRef;
use skein::{DomainSpec, MapKey, Message, Pool, ScriptDomain};

const KEYS: usize = 1_000;
const COUNTER: &str = "counter";

fn as_int(m: &Message) -> i64 {
    match m {
        Message::Integer(i) => *i,
        Message::Number(n) => *n as i64,
        other => panic!("expected a number, got {other:?}"),
    }
}

/// `n` gets of the keys in turn through `get(key index)`; the sum is checked so none is skipped.
#[inline(never)]
fn lookups(n: usize, get: impl Fn(usize) -> Option<Message>) {
    let mut sum = 0;
    for i in 0..n {
        sum += as_int(&get(i % KEYS).expect("present"));
    }
    let expected: i64 = (0..n).map(|i| (i % KEYS) as i64).sum();
    assert_eq!(black_box(sum), expected);
}

/// The same 1,000 entries as a `HashMap`, for the baselines of `shared_native`'s read sides.
fn baseline_map(names: &[&'static str]) -> HashMap<String, Message> {
    names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.to_string(), Message::Integer(i as i64)))
        .collect()
}

/// `n` sets of the keys in turn; the last value written is checked.
#[inline(never)]
fn set(table: &SharedTableRef, keys: &[MapKey], n: usize) {
    for i in 0..n {
        table
            .set(keys[i % KEYS].clone(), Message::Integer(-(i as i64)))
            .expect("set");
    }
    let last = (n - 1) % KEYS;
    let got = table
        .get(keys[last].clone())
        .expect("get")
        .expect("present");
    assert_eq!(as_int(&got), -((n - 1) as i64));
}

/// `n` uncontended `atomic` increments of one key; the count is checked.
#[inline(never)]
fn atomic(table: &SharedTableRef, n: usize) {
    // A static key, as `shared_native` uses: the count is the table's, not a key's allocation.
    let counter = MapKey::String(bytes::Bytes::from_static(COUNTER.as_bytes()));
    for _ in 0..n {
        table
            .atomic(counter.clone(), |v| {
                Some(Message::Integer(as_int(&v.expect("counter")) + 1))
            })
            .expect("atomic");
    }
    let got = table.get(COUNTER).expect("get").expect("present");
    assert_eq!(as_int(&got), n as i64);
}

/// `n` uncontended `add(COUNTER, 1)`; the count is checked.
#[inline(never)]
fn add(table: &SharedTableRef, n: usize) {
    let counter = MapKey::String(bytes::Bytes::from_static(COUNTER.as_bytes()));
    for _ in 0..n {
        table
            .add(counter.clone(), Message::Integer(1))
            .expect("add");
    }
    let got = table.get(COUNTER).expect("get").expect("present");
    assert_eq!(as_int(&got), n as i64);
}

/// Printed in place of `luau_add` when the domain has no `jobs.shared.add`.
const NO_ADD: &str = "note: this build has no jobs.shared.add; luau_add needs its Luau side";

/// Whether Luau code in `domain` can call `jobs.shared.add`.
fn has_add(domain: &ScriptDomain) -> bool {
    let probe = "local ok, add = pcall(function() return jobs.shared.add end)\n\
                 return ok and type(add) == 'function'";
    matches!(domain.eval(probe), Ok(Message::Boolean(true)))
}

/// `n` increments of `x` (a number, 1 at the start) in a Luau loop on the engine VM, each
/// written as `step`; the result is checked.
#[inline(never)]
fn luau_increments(domain: &ScriptDomain, step: &str, n: usize) {
    let x = domain
        .eval(&format!(
            "local t = jobs.shared.table('hot')
             local atomic, add = jobs.shared.atomic, jobs.shared.add
             local function inc(v) return v + 1 end
             for _ = 1, {n} do {step} end
             return t.x"
        ))
        .expect("eval");
    assert_eq!(as_int(&x), n as i64 + 1);
}

/// `n` reads `s += t.x` of the shared table from a Luau loop on the engine VM.
#[inline(never)]
fn luau(domain: &ScriptDomain, n: usize) {
    let sum = domain
        .eval(&format!(
            "local t = jobs.shared.table('hot') local s = 0 for _ = 1, {n} do s += t.x end return s"
        ))
        .expect("eval");
    assert_eq!(as_int(&sum), n as i64);
}

/// `n` sets of the middle key of a `size`-entry table held at `data` of its own named table.
#[inline(never)]
fn write(domain: &ScriptDomain, size: usize, n: usize) {
    let root = domain.shared().table(format!("size{size}")).expect("table");
    let entries = (0..size as i64).map(|i| (MapKey::Integer(i), Message::Integer(i)));
    root.set("data", Message::Map(entries.collect()))
        .expect("store");
    let data = root.table_at("data").expect("handle");
    let key = MapKey::Integer(size as i64 / 2);
    writes(&data, &key, n);
    let got = data.get(key).expect("get").expect("present");
    assert_eq!(as_int(&got), -((n - 1) as i64));
}

/// The counted part of `write_big` and `write_small`: `n` sets of `key`.
#[inline(never)]
fn writes(data: &SharedTableRef, key: &MapKey, n: usize) {
    for i in 0..n {
        data.set(key.clone(), Message::Integer(-(i as i64)))
            .expect("set");
    }
}

fn run(mode: &str, n: usize) {
    let pool = Pool::new(1);
    let domain = ScriptDomain::new(&pool, DomainSpec::new("cost")).expect("domain");
    let table = domain.shared().table("hot").expect("table");
    let (names, keys) = util::static_keys(KEYS);
    for (i, key) in keys.iter().enumerate() {
        table
            .set(key.clone(), Message::Integer(i as i64))
            .expect("set");
    }
    table.set(COUNTER, Message::Integer(0)).expect("counter");
    // A number, as Luau's `s` is: a Luau integer does not add to a number.
    table.set("x", Message::Number(1.0)).expect("x");
    match mode {
        "get" => lookups(n, |k| table.get(keys[k].clone()).expect("get")),
        "get_arcswap" => {
            let map = ArcSwap::from_pointee(baseline_map(&names));
            lookups(n, |k| map.load().get(names[k]).cloned())
        }
        "get_rwlock" => {
            let map = RwLock::new(baseline_map(&names));
            lookups(n, |k| map.read().unwrap().get(names[k]).cloned())
        }
        "set" => set(&table, &keys, n),
        "atomic" => atomic(&table, n),
        "add" => add(&table, n),
        "luau" => luau(&domain, n),
        "luau_plus" => luau_increments(&domain, "t.x += 1", n),
        "luau_atomic" => luau_increments(&domain, "atomic(t, 'x', inc)", n),
        "luau_add" if !has_add(&domain) => {
            println!("{NO_ADD}");
            std::process::exit(2);
        }
        "luau_add" => luau_increments(&domain, "add(t, 'x', 1)", n),
        "write_big" => write(&domain, 1_000_000, n),
        "write_small" => write(&domain, 10, n),
        other => {
            panic!("unknown mode {other}: get, get_arcswap, get_rwlock, set, atomic, add, luau, luau_plus, luau_atomic, luau_add, write_big or write_small")
        }
    }
}

/// [`has_add`] in a domain of its own, for the smoke run to decide before it runs the mode.
fn luau_has_add() -> bool {
    let pool = Pool::new(1);
    let domain = ScriptDomain::new(&pool, DomainSpec::new("probe")).expect("domain");
    has_add(&domain)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [mode, n] => run(mode, n.parse().expect("a count")),
        _ => {
            for mode in [
                "get",
                "get_arcswap",
                "get_rwlock",
                "set",
                "atomic",
                "add",
                "luau",
                "luau_plus",
                "luau_atomic",
                "luau_add",
                "write_big",
                "write_small",
            ] {
                if mode == "luau_add" && !luau_has_add() {
                    println!("luau_add skipped: {NO_ADD}");
                    continue;
                }
                let t = Instant::now();
                run(mode, 10_000);
                println!("{mode} x10000 (with set-up): {:?}", t.elapsed());
            }
        }
    }
}
