//! Keyed dispatch: 100,000 dispatches of an entry that answers its argument, spread over 1,000
//! keys (`opts.key = "k" .. (i % 1000)`), against the same 100,000 dispatches with no key, on 2
//! workers. Both sides are one `domain.eval` of a Luau loop that dispatches every item and then
//! awaits every promise, as `benches/dispatch.rs` does.
//!
//! Both sides pass an options table on every dispatch, built once per run before the loop: the
//! keyed side `{ key = "k" .. k }`, the unkeyed side `{}`. So both pay for reading `opts`, and the
//! loops differ only in the key: what is measured is the key machinery (lane lookup, binding,
//! in-order release), not building a string and a table per item, nor reading the options. The
//! keys stay bound between runs, as a long-lived host's keys would: after the first run every
//! key is already held.
//!
//! Each side is timed with criterion's `iter_custom`; the ratio of the medians (keyed items/s over
//! unkeyed items/s) is printed at the end. Then the two run in alternating rounds
//! (`util::alternate`), and each round's ratio is printed with their median: the figure to quote
//! on a shared machine.

mod util;

use std::time::{Duration, Instant};

use criterion::{criterion_group, BenchmarkId, Criterion, SamplingMode, Throughput};
use skein::{Message, ScriptDomain};

const ITEMS: usize = 100_000;
const KEYS: usize = 1_000;
const WORKERS: usize = 2;
/// Alternating rounds of keyed and unkeyed runs after the criterion groups.
const ROUNDS: usize = 6;

fn keyed(c: &mut Criterion) {
    let util::ModuleDomain { domain, pool, .. } =
        &util::module_domain("keyed", WORKERS, "echo.luau", util::ECHO);
    let keyed_source = util::echo_loop_with_options(ITEMS, KEYS, r#"{ key = "k" .. k }"#);
    let unkeyed_source = util::echo_loop_with_options(ITEMS, KEYS, "{}");
    let expected = (ITEMS as f64) * (ITEMS as f64 + 1.0) / 2.0;
    let mut group = c.benchmark_group("keyed");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(6))
        .throughput(Throughput::Elements(ITEMS as u64));
    for (name, source, into) in [
        ("keyed_1000_keys", &keyed_source, "keyed"),
        ("unkeyed", &unkeyed_source, "unkeyed"),
    ] {
        group.bench_function(BenchmarkId::new(name, ITEMS), |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                for _ in 0..iters {
                    let sum = domain.eval(source).expect("eval");
                    assert_eq!(number(&sum), expected);
                }
                util::keep(into, start.elapsed(), iters)
            })
        });
    }
    group.finish();
    alternating(domain, &keyed_source, &unkeyed_source, expected);
    println!("keyed: worker stats after both sides:");
    for w in pool.stats() {
        println!(
            "  worker {}: items {}, steals {}, sleeps {}, busy {:.1?}",
            w.worker, w.items_run, w.steals, w.sleeps, w.busy
        );
    }
}

/// After criterion: `ROUNDS` alternating rounds of the two sides (`util::alternate`), so that a
/// change of load on a shared machine hits both sides of a round alike; prints each round's ratio.
fn alternating(domain: &ScriptDomain, keyed: &str, unkeyed: &str, expected: f64) {
    let run = |source: &str| {
        let start = Instant::now();
        let sum = domain.eval(source).expect("eval");
        let took = start.elapsed();
        assert_eq!(number(&sum), expected);
        took
    };
    let [k, u] = util::alternate(ROUNDS, [&mut || run(keyed), &mut || run(unkeyed)]);
    util::print_rounds(
        "keyed: keyed/unkeyed throughput",
        &util::ratio_per_round(&k, &u),
        "both sides pass an options table",
    );
}

fn number(m: &Message) -> f64 {
    match m {
        Message::Number(n) => *n,
        Message::Integer(i) => *i as f64,
        other => panic!("expected a number, got {other:?}"),
    }
}

criterion_group!(benches, keyed);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    let (Some(keyed), Some(unkeyed)) = (util::median("keyed"), util::median("unkeyed")) else {
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
