//! Transfer: a 100,000-number array and a 16 MiB buffer crossing engine -> worker -> engine
//! (dispatch an echo entry, await it). A crossing is one direction, so the figure per crossing
//! is the round trip halved; nothing else is subtracted (queueing and wake-ups are in it).
//!
//! Baselines in the same run: mlua's own `Vec<f64>` IntoLua + FromLua of the same array in one
//! VM, and a 16 MiB memcpy. Goals: <= 30 ns per number per crossing, >= 4 GB/s per crossing for
//! the buffer (GB = 10^9 bytes).

use std::hint::black_box;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use criterion::{criterion_group, BenchmarkId, Criterion, SamplingMode, Throughput};
use skein::mlua::{FromLua, IntoLua, Lua};
use skein::{DomainSpec, Message, Plan, Pool, ScriptDomain};

const NUMBERS: usize = 100_000;
const BUFFER: usize = 16 * 1024 * 1024;
const ECHO: &str = "local M = {}\nfunction M.run(x) return x end\nreturn M\n";

/// Per-iteration durations of each measure (warm-up included), for the medians at the end.
static ARRAY_SKEIN: Mutex<Vec<Duration>> = Mutex::new(Vec::new());
static ARRAY_MLUA: Mutex<Vec<Duration>> = Mutex::new(Vec::new());
static BUFFER_SKEIN: Mutex<Vec<Duration>> = Mutex::new(Vec::new());
static BUFFER_MEMCPY: Mutex<Vec<Duration>> = Mutex::new(Vec::new());

fn keep(samples: &Mutex<Vec<Duration>>, took: Duration, iters: u64) -> Duration {
    samples.lock().unwrap().push(took / iters as u32);
    took
}

/// A Luau chunk that builds `make` once, echoes it `iters` times through the pool and answers
/// the seconds the round trips took, measured with `os.clock()`.
fn round_trips(make: &str, check: &str, iters: u64) -> String {
    format!(
        r#"
        local value = {make}
        local t0 = os.clock()
        for _ = 1, {iters} do
            local out = jobs.dispatch("./echo", "run", value):await()
            assert({check})
        end
        return os.clock() - t0
        "#
    )
}

fn seconds(m: &Message) -> Duration {
    match m {
        Message::Number(s) => Duration::from_secs_f64(*s),
        other => panic!("expected seconds, got {other:?}"),
    }
}

fn group<'a>(
    c: &'a mut Criterion,
    name: &str,
    elements: Throughput,
) -> criterion::BenchmarkGroup<'a, criterion::measurement::WallTime> {
    let mut g = c.benchmark_group(name);
    g.sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5))
        .throughput(elements);
    g
}

fn transfer(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("echo.luau"), ECHO).expect("write module");
    let pool = Pool::new(2);
    let plan = Plan::new().root(dir.path().canonicalize().expect("canonical tempdir"));
    let domain = ScriptDomain::new(&pool, DomainSpec::new("bench").plan(plan)).expect("domain");
    domain
        .eval(r#"return jobs.dispatch("./echo", "run", 1):await()"#)
        .expect("warm the workers");

    let make_array = format!(
        "(function() local t = table.create({NUMBERS}) \
         for i = 1, {NUMBERS} do t[i] = i + 0.5 end return t end)()"
    );
    let check_array = format!("#out == {NUMBERS} and out[{NUMBERS}] == {NUMBERS}.5");
    let mut g = group(c, "transfer_array", Throughput::Elements(NUMBERS as u64));
    g.bench_function(BenchmarkId::new("skein_round_trip", NUMBERS), |b| {
        b.iter_custom(|iters| {
            let took = seconds(
                &domain
                    .eval(&round_trips(&make_array, &check_array, iters))
                    .expect("eval"),
            );
            keep(&ARRAY_SKEIN, took, iters)
        })
    });
    let lua = Lua::new();
    // Interpreted, as Skein runs a module without `--!native`: Skein builds mlua without
    // `luau-jit`, so this VM has no code generator.
    let array: Vec<f64> = (1..=NUMBERS).map(|i| i as f64 + 0.5).collect();
    g.bench_function(BenchmarkId::new("mlua_vec_into_from", NUMBERS), |b| {
        b.iter_custom(|iters| {
            let t0 = Instant::now();
            for _ in 0..iters {
                let table = black_box(array.as_slice()).into_lua(&lua).expect("into");
                let back = Vec::<f64>::from_lua(table, &lua).expect("from");
                assert_eq!(back.len(), NUMBERS);
                black_box(back);
            }
            keep(&ARRAY_MLUA, t0.elapsed(), iters)
        })
    });
    g.finish();

    let make_buffer = format!("buffer.create({BUFFER})");
    let check_buffer = format!("buffer.len(out) == {BUFFER}");
    let mut g = group(c, "transfer_buffer", Throughput::Bytes(BUFFER as u64));
    g.bench_function(BenchmarkId::new("skein_round_trip", BUFFER), |b| {
        b.iter_custom(|iters| {
            let took = seconds(
                &domain
                    .eval(&round_trips(&make_buffer, &check_buffer, iters))
                    .expect("eval"),
            );
            keep(&BUFFER_SKEIN, took, iters)
        })
    });
    let src = vec![7u8; BUFFER];
    let mut dst = vec![0u8; BUFFER];
    g.bench_function(BenchmarkId::new("memcpy", BUFFER), |b| {
        b.iter_custom(|iters| {
            let t0 = Instant::now();
            for _ in 0..iters {
                dst.copy_from_slice(black_box(&src));
                black_box(&mut dst);
            }
            keep(&BUFFER_MEMCPY, t0.elapsed(), iters)
        })
    });
    g.finish();
}

/// The median per-iteration time of one measure, or `None` when a filter skipped it.
fn median(samples: &Mutex<Vec<Duration>>) -> Option<Duration> {
    let mut v = samples.lock().unwrap().clone();
    v.sort();
    v.get(v.len() / 2).copied()
}

criterion_group!(benches, transfer);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();

    let medians = (
        median(&ARRAY_SKEIN),
        median(&ARRAY_MLUA),
        median(&BUFFER_SKEIN),
        median(&BUFFER_MEMCPY),
    );
    let (Some(array_skein), Some(array_mlua), Some(buffer_skein), Some(buffer_memcpy)) = medians
    else {
        println!("transfer: some measures were filtered out; no ratios");
        return;
    };
    // Skein: one crossing is half a round trip. mlua: IntoLua + FromLua is one crossing's work.
    let skein_ns = array_skein.as_nanos() as f64 / 2.0 / NUMBERS as f64;
    let mlua_ns = array_mlua.as_nanos() as f64 / NUMBERS as f64;
    println!(
        "transfer array: skein {skein_ns:.2} ns/number/crossing, mlua Vec<f64> into+from \
         {mlua_ns:.2} ns/number; ratio {:.2}x; goal <= 30 ns: {}",
        skein_ns / mlua_ns,
        if skein_ns <= 30.0 { "met" } else { "MISSED" }
    );
    let gbps = |bytes: f64, d: f64| bytes / d / 1e9;
    let skein_gbps = gbps(BUFFER as f64, buffer_skein.as_secs_f64() / 2.0);
    let memcpy_gbps = gbps(BUFFER as f64, buffer_memcpy.as_secs_f64());
    println!(
        "transfer buffer: skein {skein_gbps:.2} GB/s per crossing, memcpy {memcpy_gbps:.2} GB/s; \
         ratio {:.2}x; goal >= 4 GB/s: {}",
        skein_gbps / memcpy_gbps,
        if skein_gbps >= 4.0 { "met" } else { "MISSED" }
    );
}
