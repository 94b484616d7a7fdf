//! `jobs.map` throughput: one map of `./echo`'s `run` (which answers its argument) over a list of
//! 100,000 integers, awaited, on 2 workers, beside the hand-rolled pool of `benches/dispatch.rs`
//! (rayon threads with a thread-local mlua VM each, `util::baseline`).
//!
//! Three sides: Skein (one `domain.eval` that makes the list in Luau, maps it and sums the
//! results), the baseline as `benches/dispatch.rs` issues it (a rayon spawn and a channel send
//! per item: the "hand-rolled pool", the goal's reference), and the same pool written as
//! a rayon parallel map (`par_iter().map().collect()`: the best a user would hand-roll for a map,
//! informative). Criterion times each; then the three run in alternating rounds
//! (`util::alternate`) and each round's ratio is printed with their median, the figure to quote
//! on a noisy machine. Goal: Skein at least 1.0x the hand-rolled pool.
//!
//! The instructions per element are counted by `benches/dispatch_cost.rs` in its `map` mode,
//! under callgrind: `benches/dispatch_cost.sh map`.

mod util;

use std::time::{Duration, Instant};

use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use skein::Message;

const ITEMS: usize = 100_000;
const WORKERS: usize = 2;
/// Alternating rounds of the three sides after the criterion groups.
const ROUNDS: usize = 8;
const EXPECTED: i64 = (ITEMS as i64) * (ITEMS as i64 + 1) / 2;

fn as_i64(m: &Message) -> i64 {
    match m {
        Message::Integer(i) => *i,
        Message::Number(n) => *n as i64,
        other => panic!("expected a number, got {other:?}"),
    }
}

/// The time of one call of `run`.
fn once(run: impl Fn()) -> Duration {
    let start = Instant::now();
    run();
    start.elapsed()
}

/// Times `iters` calls of `run` for criterion and keeps the per-run time under `name`.
fn timed(name: &'static str, iters: u64, run: impl Fn()) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        run();
    }
    util::keep(name, start.elapsed(), iters)
}

fn map(c: &mut Criterion) {
    let fixture = util::module_domain("bench", WORKERS, "echo.luau", util::ECHO);
    let source = util::echo_map(ITEMS);
    let skein = || {
        let sum = fixture.domain.eval(&source).expect("eval");
        assert_eq!(as_i64(&sum), EXPECTED);
    };
    let rayon = rayon::ThreadPoolBuilder::new()
        .num_threads(WORKERS)
        .build()
        .expect("rayon pool");
    let spawned = || assert_eq!(util::baseline::spawn_each(&rayon, ITEMS), EXPECTED);
    let par_map = || assert_eq!(util::baseline::par_map(&rayon, ITEMS), EXPECTED);

    let mut group = util::group(c, "map", Throughput::Elements(ITEMS as u64));
    group.bench_function(BenchmarkId::new("skein_jobs_map", ITEMS), |b| {
        b.iter_custom(|iters| timed("skein", iters, skein))
    });
    group.bench_function(BenchmarkId::new("rayon_mlua_spawn_each", ITEMS), |b| {
        b.iter_custom(|iters| timed("spawn_each", iters, spawned))
    });
    group.bench_function(BenchmarkId::new("rayon_mlua_par_map", ITEMS), |b| {
        b.iter_custom(|iters| timed("par_map", iters, par_map))
    });
    group.finish();

    let [ours, spawn_each, par] = util::alternate(
        ROUNDS,
        [&mut || once(skein), &mut || once(spawned), &mut || {
            once(par_map)
        }],
    );
    util::print_rounds(
        "map: skein jobs.map/hand-rolled pool (spawn per item) throughput",
        &util::ratio_per_round(&ours, &spawn_each),
        "goal >= 1.00x",
    );
    util::print_rounds(
        "map: skein jobs.map/hand-rolled rayon par_iter map throughput",
        &util::ratio_per_round(&ours, &par),
        "informative",
    );
}

criterion_group!(benches, map);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    util::ratio(
        "map (criterion medians)",
        "skein",
        ITEMS,
        "spawn_each",
        ITEMS,
        "goal >= 1.00x",
    );
    util::ratio(
        "map (criterion medians)",
        "skein",
        ITEMS,
        "par_map",
        ITEMS,
        "informative",
    );
}
