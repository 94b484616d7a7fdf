//! Keyed dispatch: 100,000 dispatches of an entry that answers its argument, spread over 1,000
//! keys (`opts.key = "k" .. (i % 1000)`), against the same 100,000 dispatches with no key, on 2
//! workers. Both sides are one `domain.eval` of a Luau loop that dispatches every item and then
//! awaits every promise, as `benches/dispatch.rs` does.
//!
//! The 1,000 option tables are built once per run, before the loop, so the loop itself differs
//! only in the key it passes: what is measured is the key machinery (lane lookup, binding,
//! in-order release), not building a string and a table per item. The keys stay bound between
//! runs, as a long-lived host's keys would: after the first run every key is already held.
//!
//! Each side is timed with criterion's `iter_custom`; the ratio of the medians (keyed items/s over
//! unkeyed items/s) is printed at the end.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use criterion::{criterion_group, BenchmarkId, Criterion, SamplingMode, Throughput};
use skein::{DomainSpec, Message, Plan, Pool, ScriptDomain};

const ITEMS: usize = 100_000;
const KEYS: usize = 1_000;
const WORKERS: usize = 2;
/// Keyed and unkeyed runs timed back to back after the criterion groups.
const PAIRS: usize = 4;
const ECHO: &str = "local M = {}\nfunction M.run(x) return x end\nreturn M\n";

static KEYED: Mutex<Vec<Duration>> = Mutex::new(Vec::new());
static UNKEYED: Mutex<Vec<Duration>> = Mutex::new(Vec::new());

fn keyed(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("echo.luau"), ECHO).expect("write module");
    let pool = Pool::new(WORKERS);
    let plan = Plan::new().root(dir.path().canonicalize().expect("canonical tempdir"));
    let domain = ScriptDomain::new(&pool, DomainSpec::new("keyed").plan(plan)).expect("domain");
    let keyed_source = format!(
        r#"
        local opts = table.create({KEYS})
        for k = 0, {KEYS} - 1 do opts[k + 1] = {{ key = "k" .. k }} end
        local n = {ITEMS}
        local ps = table.create(n)
        for i = 1, n do ps[i] = jobs.dispatch("./echo", "run", i, opts[i % {KEYS} + 1]) end
        local sum = 0
        for i = 1, n do sum += ps[i]:await() end
        return sum
        "#
    );
    let unkeyed_source = format!(
        r#"
        local n = {ITEMS}
        local ps = table.create(n)
        for i = 1, n do ps[i] = jobs.dispatch("./echo", "run", i) end
        local sum = 0
        for i = 1, n do sum += ps[i]:await() end
        return sum
        "#
    );
    let expected = (ITEMS as f64) * (ITEMS as f64 + 1.0) / 2.0;
    let mut group = c.benchmark_group("keyed");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(6))
        .throughput(Throughput::Elements(ITEMS as u64));
    for (name, source, into) in [
        ("keyed_1000_keys", &keyed_source, &KEYED),
        ("unkeyed", &unkeyed_source, &UNKEYED),
    ] {
        group.bench_function(BenchmarkId::new(name, ITEMS), |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                for _ in 0..iters {
                    let sum = domain.eval(source).expect("eval");
                    assert_eq!(number(&sum), expected);
                }
                let took = start.elapsed();
                into.lock().unwrap().push(took / iters as u32);
                took
            })
        });
    }
    group.finish();
    alternating(&domain, &keyed_source, &unkeyed_source, expected);
    println!("keyed: worker stats after both sides:");
    for w in pool.stats() {
        println!(
            "  worker {}: items {}, steals {}, sleeps {}, busy {:.1?}",
            w.worker, w.items_run, w.steals, w.sleeps, w.busy
        );
    }
}

/// Diagnostic, outside criterion: a few runs of each side back to back, so that a change of load
/// on a shared machine hits both sides of a pair alike; prints each pair's ratio.
fn alternating(domain: &ScriptDomain, keyed: &str, unkeyed: &str, expected: f64) {
    let run = |source: &str| {
        let start = Instant::now();
        let sum = domain.eval(source).expect("eval");
        let took = start.elapsed();
        assert_eq!(number(&sum), expected);
        took
    };
    let ratios: Vec<String> = (0..PAIRS)
        .map(|_| {
            let k = run(keyed);
            let u = run(unkeyed);
            format!("{:.2}x", u.as_secs_f64() / k.as_secs_f64())
        })
        .collect();
    println!(
        "keyed: {PAIRS} alternating pairs, keyed/unkeyed throughput of each: {}",
        ratios.join(", ")
    );
}

fn number(m: &Message) -> f64 {
    match m {
        Message::Number(n) => *n,
        Message::Integer(i) => *i as f64,
        other => panic!("expected a number, got {other:?}"),
    }
}

/// The median per-run time of one side, or `None` when a filter skipped it.
fn median(samples: &Mutex<Vec<Duration>>) -> Option<Duration> {
    let mut v = samples.lock().unwrap().clone();
    v.sort();
    v.get(v.len() / 2).copied()
}

criterion_group!(benches, keyed);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    let (Some(keyed), Some(unkeyed)) = (median(&KEYED), median(&UNKEYED)) else {
        println!("keyed: one side was filtered out; no ratio");
        return;
    };
    let per_s = |d: Duration| ITEMS as f64 / d.as_secs_f64();
    println!(
        "keyed: {KEYS} keys {:.0} items/s ({keyed:?} per {ITEMS}), no key {:.0} items/s \
         ({unkeyed:?}); ratio keyed/unkeyed throughput = {:.2}x",
        per_s(keyed),
        per_s(unkeyed),
        per_s(keyed) / per_s(unkeyed)
    );
}
