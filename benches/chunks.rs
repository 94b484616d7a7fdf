//! Chunk overhead: `jobs.parallelFor` over 10^6 elements with an entry that does nothing but
//! answer its chunk's index, cut into 8, 64, 512 and 4096 chunks on 2 workers. The elements cost
//! nothing, so what grows with the chunk count is what one chunk costs: an item queued, a VM call
//! with its chunk table, a result sent home and gathered.
//!
//! Baseline, in the same run: the same entry called N times in one plain `mlua::Lua` on this
//! thread, each call with the chunk table built as a worker builds it (what a chunk costs with
//! no pool). Printed at the end, per N: each side's time per run and per chunk, and for Skein the
//! cost per extra chunk over the 8-chunk run, plus the least-squares slope over the four points.
//! Goal: at most 5 us per chunk.

mod util;

use std::sync::Mutex;
use std::time::{Duration, Instant};
use util::split;

use criterion::{criterion_group, BenchmarkId, Criterion, SamplingMode};
use skein::mlua::{self, Lua};
use skein::{DomainSpec, Message, Plan, Pool, ScriptDomain};

const ELEMENTS: usize = 1_000_000;
const WORKERS: usize = 2;
const COUNTS: [usize; 4] = [8, 64, 512, 4096];
const EMPTY: &str = "local M = {}\nfunction M.run(c) return c.index end\nreturn M\n";

/// `(chunks, per-run time)` of every `iter_custom` call of each side.
static SKEIN: Mutex<Vec<(usize, Duration)>> = Mutex::new(Vec::new());
static PLAIN: Mutex<Vec<(usize, Duration)>> = Mutex::new(Vec::new());

fn timed(
    iters: u64,
    into: &Mutex<Vec<(usize, Duration)>>,
    n: usize,
    mut run: impl FnMut(),
) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        run();
    }
    let took = start.elapsed();
    into.lock().unwrap().push((n, took / iters as u32));
    took
}

fn chunks(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("empty.luau"), EMPTY).expect("write module");
    let pool = Pool::new(WORKERS);
    let plan = Plan::new().root(dir.path().canonicalize().expect("canonical tempdir"));
    let domain = ScriptDomain::new(&pool, DomainSpec::new("chunks").plan(plan)).expect("domain");

    let lua = Lua::new();
    // Interpreted, as Skein runs a module without `--!native`: Skein builds mlua without
    // `luau-jit`, so this VM has no code generator.
    let module: mlua::Table = lua.load(EMPTY).eval().expect("load entry");
    let run: mlua::Function = module.get("run").expect("run");

    let mut group = c.benchmark_group("chunks");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for n in COUNTS {
        let source = format!(
            r#"
            local parts = jobs.parallelFor("./empty", "run", {ELEMENTS}, nil, {{ chunks = {n} }}):await()
            return #parts + parts[{n}]
            "#
        );
        group.bench_function(BenchmarkId::new("skein", n), |b| {
            b.iter_custom(|iters| {
                timed(iters, &SKEIN, n, || {
                    let got = domain.eval(&source).expect("eval");
                    assert_eq!(number(&got), 2.0 * n as f64);
                })
            })
        });
        let runs = split(ELEMENTS, n);
        group.bench_function(BenchmarkId::new("plain_mlua", n), |b| {
            b.iter_custom(|iters| {
                timed(iters, &PLAIN, n, || {
                    let mut last = 0;
                    for &(index, first, end) in &runs {
                        let t = lua.create_table().expect("table");
                        t.set("index", index).expect("set");
                        t.set("count", end - first + 1).expect("set");
                        t.set("first", first).expect("set");
                        t.set("last", end).expect("set");
                        last = run.call::<usize>(t).expect("call");
                    }
                    assert_eq!(last, n);
                })
            })
        });
    }
    group.finish();
}

fn number(m: &Message) -> f64 {
    match m {
        Message::Number(n) => *n,
        Message::Integer(i) => *i as f64,
        other => panic!("expected a number, got {other:?}"),
    }
}

/// The median per-run time of one side at `n` chunks, or `None` when a filter skipped it.
fn median(samples: &Mutex<Vec<(usize, Duration)>>, n: usize) -> Option<Duration> {
    let mut v: Vec<Duration> = samples
        .lock()
        .unwrap()
        .iter()
        .filter(|(k, _)| *k == n)
        .map(|(_, d)| *d)
        .collect();
    v.sort();
    v.get(v.len() / 2).copied()
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

criterion_group!(benches, chunks);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    let points: Vec<(usize, Option<Duration>, Option<Duration>)> = COUNTS
        .iter()
        .map(|&n| (n, median(&SKEIN, n), median(&PLAIN, n)))
        .collect();
    let base = points[0].1;
    for &(n, skein, plain) in &points {
        let mut line = format!("chunks: N = {n:>4}:");
        if let Some(s) = skein {
            line += &format!(
                " skein {:.1} us per run, {:.2} us per chunk",
                us(s),
                us(s) / n as f64
            );
            if let (Some(b), true) = (base, n > COUNTS[0]) {
                line += &format!(
                    ", {:.2} us per chunk past 8",
                    (us(s) - us(b)) / (n - COUNTS[0]) as f64
                );
            }
        }
        if let Some(p) = plain {
            line += &format!(
                "; plain mlua {:.1} us per run, {:.3} us per call",
                us(p),
                us(p) / n as f64
            );
        }
        if let (Some(s), Some(p)) = (skein, plain) {
            line += &format!("; ratio {:.0}x", s.as_secs_f64() / p.as_secs_f64());
        }
        println!("{line}");
    }
    let fit: Vec<(f64, f64)> = points
        .iter()
        .filter_map(|&(n, s, _)| s.map(|s| (n as f64, us(s))))
        .collect();
    if fit.len() == COUNTS.len() {
        let k = fit.len() as f64;
        let mx = fit.iter().map(|p| p.0).sum::<f64>() / k;
        let my = fit.iter().map(|p| p.1).sum::<f64>() / k;
        let sxy: f64 = fit.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
        let sxx: f64 = fit.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
        let slope = sxy / sxx;
        println!(
            "chunks: skein least-squares slope {slope:.2} us per chunk (intercept {:.1} us); \
             goal <= 5 us per chunk: {}",
            my - slope * mx,
            if slope <= 5.0 { "met" } else { "missed" }
        );
    }
}
