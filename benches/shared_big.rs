//! A big shared table: `snapshot` of a 1,000,000-entry table beside cloning a 1M-entry
//! `HashMap<i64, Message>` and building a 1M-entry `Message::Map`; and a write to one key of it
//! beside the same write to a 10-entry table. A write to an existing key must cost the same
//! whatever the table's size. Goals: the big write within 1.2x the small one; the
//! snapshot no worse than 0.4x a `HashMap::clone` (entries per second). Ratios of the medians
//! are printed at the end, each goal's with whether this run met it. Each group runs alone with
//! its baseline under a filter: `-- shared_big_snapshot` or `-- shared_big_write`.
//!
//! Both tables sit at key `data` of their own named table and are written through a live handle
//! (`table_at`), so the two writes walk the same path. Results are dropped inside the timed loop
//! on every side.

mod util;

use std::collections::HashMap;
use std::hint::black_box;
use std::time::Instant;

use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use skein::shared::SharedTableRef;
use skein::{DomainSpec, MapKey, Message, Pool, ScriptDomain};

const BIG: usize = 1_000_000;
const SMALL: usize = 10;
/// Writes per iteration of the write measures.
const WRITES: usize = 100_000;

fn entries(n: usize) -> Vec<(MapKey, Message)> {
    (0..n as i64)
        .map(|i| (MapKey::Integer(i), Message::Integer(i)))
        .collect()
}

/// A live handle on an `n`-entry table stored at `data` of the named table `name`.
fn table_of(domain: &ScriptDomain, name: &str, n: usize) -> SharedTableRef {
    let root = domain.shared().table(name).expect("table");
    root.set("data", Message::Map(entries(n))).expect("store");
    let data = root.table_at("data").expect("handle");
    let Message::Map(back) = data.snapshot().expect("snapshot") else {
        panic!("expected a map")
    };
    assert_eq!(back.len(), n);
    data
}

fn big(c: &mut Criterion) {
    let pool = Pool::new(1);
    let domain = ScriptDomain::new(&pool, DomainSpec::new("bench")).expect("domain");
    let t0 = Instant::now();
    let big = table_of(&domain, "big", BIG);
    println!(
        "storing and checking the {BIG}-entry table took {:.1?}",
        t0.elapsed()
    );
    let small = table_of(&domain, "small", SMALL);
    // Two sizes between, to show how the write's cost grows with the size (the B-tree's depth).
    let thousand = table_of(&domain, "thousand", 1_000);
    let hundred_k = table_of(&domain, "hundred_k", 100_000);

    let mut g = util::group(c, "shared_big_snapshot", Throughput::Elements(BIG as u64));
    g.bench_function(BenchmarkId::new("skein_snapshot", BIG), |b| {
        b.iter_custom(|iters| {
            let t0 = Instant::now();
            for _ in 0..iters {
                let Message::Map(m) = big.snapshot().expect("snapshot") else {
                    panic!("expected a map")
                };
                assert_eq!(m.len(), BIG);
                drop(black_box(m));
            }
            util::keep("snapshot/skein", t0.elapsed(), iters)
        })
    });
    let map: HashMap<i64, Message> = (0..BIG as i64).map(|i| (i, Message::Integer(i))).collect();
    g.bench_function(BenchmarkId::new("hashmap_clone", BIG), |b| {
        b.iter_custom(|iters| {
            let t0 = Instant::now();
            for _ in 0..iters {
                let m = black_box(&map).clone();
                assert_eq!(m.len(), BIG);
                drop(black_box(m));
            }
            util::keep("snapshot/hashmap_clone", t0.elapsed(), iters)
        })
    });
    g.bench_function(BenchmarkId::new("build_message_map", BIG), |b| {
        b.iter_custom(|iters| {
            let t0 = Instant::now();
            for _ in 0..iters {
                let m = Message::Map(entries(black_box(BIG)));
                drop(black_box(m));
            }
            util::keep("snapshot/build_message_map", t0.elapsed(), iters)
        })
    });
    g.finish();
    drop(map);

    let mut g = util::group(c, "shared_big_write", Throughput::Elements(WRITES as u64));
    for (side, table, n) in [
        ("write/big", &big, BIG),
        ("write/100k", &hundred_k, 100_000),
        ("write/1k", &thousand, 1_000),
        ("write/small", &small, SMALL),
    ] {
        g.bench_function(BenchmarkId::new(side, n), |b| {
            b.iter_custom(|iters| {
                let key = MapKey::Integer(n as i64 / 2);
                let t0 = Instant::now();
                for _ in 0..iters {
                    for i in 0..WRITES {
                        table
                            .set(key.clone(), Message::Integer(i as i64))
                            .expect("set");
                    }
                }
                let took = t0.elapsed();
                assert_eq!(
                    table.get(key).expect("get"),
                    Some(Message::Integer(WRITES as i64 - 1))
                );
                let kept = table.snapshot().expect("snapshot");
                assert!(
                    matches!(kept, Message::Map(v) if v.len() == n),
                    "entries lost"
                );
                util::keep(side, took, iters)
            })
        });
    }
    g.finish();
}

criterion_group!(benches, big);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    use util::{ratio, ratio_goal, Goal};
    println!("--- shared_big (ratios of medians, this run) ---");
    ratio_goal(
        "snapshot 1M, entries/s",
        "snapshot/skein",
        BIG,
        "snapshot/hashmap_clone",
        BIG,
        Goal::at_least(0.4, "0.4x"),
    );
    ratio(
        "snapshot 1M",
        "snapshot/skein",
        BIG,
        "snapshot/build_message_map",
        BIG,
        "entries/s; informative",
    );
    ratio_goal(
        "one-key write, small over big = how much more the 1M write costs",
        "write/small",
        WRITES,
        "write/big",
        WRITES,
        Goal::at_most(1.2, "1.2x"),
    );
    for mid in ["write/1k", "write/100k"] {
        ratio(
            "one-key write",
            "write/small",
            WRITES,
            mid,
            WRITES,
            "small over a mid size; informative",
        );
    }
}
