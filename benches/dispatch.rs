//! Dispatch throughput: 100,000 dispatches of an entry that answers its argument, all awaited,
//! on 2 workers, beside what a user would hand-roll with rayon and thread-local mlua VMs.
//!
//! Three sides: Skein issuing from a Luau loop (one `domain.eval`), Skein issuing from Rust
//! (`ScriptDomain::dispatch` and `Promise::wait`, as the baseline issues), and the baseline. Each
//! is timed with criterion's `iter_custom` and the ratios of the medians are printed at the end.
//! Then the three run in alternating rounds (`util::alternate`), so a change of load on a shared
//! machine falls on every side of a round alike, and each round's ratio is printed with their
//! median: the figure to quote on a noisy machine. Both pools live for the whole bench (each
//! parks its threads while the other side runs). Goal: Skein at least 0.8x the baseline.

mod util;

use std::time::{Duration, Instant};

use criterion::{criterion_group, BenchmarkId, Criterion, SamplingMode, Throughput};
use skein::{Message, Pool, ScriptDomain};

const ITEMS: usize = 100_000;
const WORKERS: usize = 2;
/// Alternating rounds of the three sides after the criterion groups.
const ROUNDS: usize = 6;
const EXPECTED: i64 = (ITEMS as i64) * (ITEMS as i64 + 1) / 2;

/// Skein's pool and domain with the echo module, and the Luau loop of the Luau-issued side.
struct SkeinSide {
    fixture: util::ModuleDomain,
    source: String,
}

impl SkeinSide {
    fn new() -> SkeinSide {
        SkeinSide {
            fixture: util::module_domain("bench", WORKERS, "echo.luau", util::ECHO),
            source: util::echo_loop(ITEMS),
        }
    }

    /// One run issued from Luau: `ITEMS` dispatches, then every await.
    fn issue_from_luau(&self) {
        let sum = self.fixture.domain.eval(&self.source).expect("eval");
        assert_eq!(as_i64(&sum), EXPECTED);
    }

    /// The same work issued from Rust, as the hand-rolled baseline issues it: no Luau loop and no
    /// PromiseHandle on the engine side, a host `Promise` per item instead.
    fn issue_from_rust(&self) {
        let promises: Vec<_> = (1..=ITEMS as i64)
            .map(|i| {
                self.fixture
                    .domain
                    .dispatch("./echo", "run", Message::Integer(i))
                    .expect("dispatch")
            })
            .collect();
        let sum: i64 = promises
            .into_iter()
            .map(|p| as_i64(&p.wait().expect("wait")))
            .sum();
        assert_eq!(sum, EXPECTED);
    }
}

/// Times `iters` calls of `run` for criterion and keeps the per-run time under `name`.
fn timed(name: &'static str, iters: u64, run: impl Fn()) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        run();
    }
    util::keep(name, start.elapsed(), iters)
}

/// The time of one call of `run`.
fn once(run: impl Fn()) -> Duration {
    let start = Instant::now();
    run();
    start.elapsed()
}

fn dispatch(c: &mut Criterion) {
    let skein = SkeinSide::new();
    let rayon = rayon::ThreadPoolBuilder::new()
        .num_threads(WORKERS)
        .build()
        .expect("rayon pool");
    let mut group = c.benchmark_group("dispatch");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(10))
        .throughput(Throughput::Elements(ITEMS as u64));
    group.bench_function(BenchmarkId::new("skein", ITEMS), |b| {
        b.iter_custom(|iters| timed("skein", iters, || skein.issue_from_luau()))
    });
    group.bench_function(BenchmarkId::new("skein_host_issued", ITEMS), |b| {
        b.iter_custom(|iters| timed("skein_host", iters, || skein.issue_from_rust()))
    });
    group.bench_function(BenchmarkId::new("rayon_mlua_baseline", ITEMS), |b| {
        b.iter_custom(|iters| timed("baseline", iters, || baseline_run(&rayon)))
    });
    group.finish();
    phases(&skein.fixture.pool, &skein.fixture.domain);

    let [luau, host, base] = util::alternate(
        ROUNDS,
        [
            &mut || once(|| skein.issue_from_luau()),
            &mut || once(|| skein.issue_from_rust()),
            &mut || once(|| baseline_run(&rayon)),
        ],
    );
    util::print_rounds(
        "dispatch: skein (issued from Luau)/baseline throughput",
        &util::ratio_per_round(&luau, &base),
        "goal >= 0.80x",
    );
    util::print_rounds(
        "dispatch: skein (issued from Rust)/baseline throughput",
        &util::ratio_per_round(&host, &base),
        "goal >= 0.80x",
    );
}

/// Diagnostic, outside criterion: where one run of the Skein side spends its time (issuing the
/// dispatches vs awaiting them), and how the workers behaved meanwhile.
fn phases(pool: &Pool, domain: &ScriptDomain) {
    let before = pool.stats();
    let source = format!(
        r#"
        local n = {ITEMS}
        local ps = table.create(n)
        local t0 = os.clock()
        for i = 1, n do ps[i] = jobs.dispatch("./echo", "run", i) end
        local t1 = os.clock()
        for i = 1, n do ps[i]:await() end
        local t2 = os.clock()
        return {{ t1 - t0, t2 - t1 }}
        "#
    );
    let wall = Instant::now();
    let m = domain.eval(&source).expect("eval");
    let wall = wall.elapsed();
    let after = pool.stats();
    let Message::List(parts) = m else {
        panic!("expected a list, got {m:?}")
    };
    println!(
        "dispatch phases (one run, {wall:.1?} wall): issuing {ITEMS} dispatches {:.1} ms, awaiting them {:.1} ms",
        as_f64(&parts[0]) * 1e3,
        as_f64(&parts[1]) * 1e3
    );
    for (b, a) in before.iter().zip(&after) {
        println!(
            "  worker {}: items {}, steals {}, sleeps {}, busy {:.1?}",
            a.worker,
            a.items_run - b.items_run,
            a.steals - b.steals,
            a.sleeps - b.sleeps,
            a.busy - b.busy
        );
    }
}

/// One baseline run: `ITEMS` spawns on the rayon pool, each answering through a channel.
fn baseline_run(pool: &rayon::ThreadPool) {
    assert_eq!(util::baseline::spawn_each(pool, ITEMS), EXPECTED);
}

fn as_i64(m: &Message) -> i64 {
    match m {
        Message::Integer(i) => *i,
        Message::Number(n) => *n as i64,
        other => panic!("expected a number, got {other:?}"),
    }
}

fn as_f64(m: &Message) -> f64 {
    match m {
        Message::Integer(i) => *i as f64,
        Message::Number(n) => *n,
        other => panic!("expected a number, got {other:?}"),
    }
}

criterion_group!(benches, dispatch);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    let (Some(skein), Some(base)) = (util::median("skein"), util::median("baseline")) else {
        println!("dispatch: one side was filtered out; no ratio");
        return;
    };
    let per_s = |d: Duration| ITEMS as f64 / d.as_secs_f64();
    println!(
        "dispatch (criterion medians): skein {:.0} items/s ({:?} per {ITEMS}), baseline {:.0} \
         items/s ({:?}); ratio skein/baseline = {:.2}x (goal >= 0.80x)",
        per_s(skein),
        skein,
        per_s(base),
        base,
        per_s(skein) / per_s(base)
    );
    if let Some(host) = util::median("skein_host") {
        println!(
            "dispatch (issued from Rust like the baseline): skein {:.0} items/s ({:?}); \
             ratio = {:.2}x",
            per_s(host),
            host,
            per_s(host) / per_s(base)
        );
    }
}
