//! Dispatch throughput: 100,000 dispatches of an entry that answers its argument, all awaited,
//! on 2 workers, beside what a user would hand-roll with rayon and thread-local mlua VMs.
//!
//! Both sides are timed with criterion's `iter_custom`; the ratio of the medians (Skein items/s
//! over baseline items/s) is printed at the end. Goal: at least 1.0x.

use std::cell::RefCell;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use criterion::{criterion_group, BenchmarkId, Criterion, SamplingMode, Throughput};
use skein::mlua::{self, Lua};
use skein::{DomainSpec, Message, Plan, Pool, ScriptDomain};

const ITEMS: usize = 100_000;
const WORKERS: usize = 2;
const ECHO: &str = "local M = {}\nfunction M.run(x) return x end\nreturn M\n";

/// Per-item durations of each side, every call of `iter_custom` (warm-up included).
static SKEIN: Mutex<Vec<Duration>> = Mutex::new(Vec::new());
static BASELINE: Mutex<Vec<Duration>> = Mutex::new(Vec::new());
static SKEIN_HOST: Mutex<Vec<Duration>> = Mutex::new(Vec::new());

fn skein_side(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("echo.luau"), ECHO).expect("write module");
    let pool = Pool::new(WORKERS);
    let plan = Plan::new().root(dir.path().canonicalize().expect("canonical tempdir"));
    let domain = ScriptDomain::new(&pool, DomainSpec::new("bench").plan(plan)).expect("domain");
    let source = format!(
        r#"
        local n = {ITEMS}
        local ps = table.create(n)
        for i = 1, n do ps[i] = jobs.dispatch("./echo", "run", i) end
        local sum = 0
        for i = 1, n do sum += ps[i]:await() end
        return sum
        "#
    );
    let expected = (ITEMS as i64) * (ITEMS as i64 + 1) / 2;
    let mut group = c.benchmark_group("dispatch");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(10))
        .throughput(Throughput::Elements(ITEMS as u64));
    group.bench_function(BenchmarkId::new("skein", ITEMS), |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                let sum = domain.eval(&source).expect("eval");
                assert_eq!(as_i64(&sum), expected);
            }
            let took = start.elapsed();
            SKEIN.lock().unwrap().push(took / iters as u32);
            took
        })
    });
    // The same work issued from Rust, as the hand-rolled baseline issues it: no Luau loop and no
    // PromiseHandle on the engine side, a host `Promise` per item instead.
    group.bench_function(BenchmarkId::new("skein_host_issued", ITEMS), |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                let promises: Vec<_> = (1..=ITEMS as i64)
                    .map(|i| {
                        domain
                            .dispatch("./echo", "run", Message::Integer(i))
                            .expect("dispatch")
                    })
                    .collect();
                let sum: i64 = promises
                    .into_iter()
                    .map(|p| as_i64(&p.wait().expect("wait")))
                    .sum();
                assert_eq!(sum, expected);
            }
            let took = start.elapsed();
            SKEIN_HOST.lock().unwrap().push(took / iters as u32);
            took
        })
    });
    group.finish();
    phases(&pool, &domain);
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

thread_local! {
    /// The hand-rolled worker VM: built once per rayon thread, with the entry loaded once.
    static VM: RefCell<Option<(Lua, mlua::Function)>> = const { RefCell::new(None) };
}

fn baseline_item(x: i64) -> i64 {
    VM.with(|slot| {
        let mut slot = slot.borrow_mut();
        let (_, run) = slot.get_or_insert_with(|| {
            let lua = Lua::new();
            let module: mlua::Table = lua.load(ECHO).eval().expect("load echo");
            let run: mlua::Function = module.get("run").expect("run");
            (lua, run)
        });
        run.call::<i64>(x).expect("call")
    })
}

fn baseline_side(c: &mut Criterion) {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(WORKERS)
        .build()
        .expect("rayon pool");
    let expected = (ITEMS as i64) * (ITEMS as i64 + 1) / 2;
    let mut group = c.benchmark_group("dispatch");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(10))
        .throughput(Throughput::Elements(ITEMS as u64));
    group.bench_function(BenchmarkId::new("rayon_mlua_baseline", ITEMS), |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                let (tx, rx) = crossbeam_channel::unbounded::<i64>();
                for i in 1..=ITEMS as i64 {
                    let tx = tx.clone();
                    pool.spawn(move || {
                        let _ = tx.send(baseline_item(i));
                    });
                }
                drop(tx);
                let sum: i64 = (0..ITEMS).map(|_| rx.recv().expect("result")).sum();
                assert_eq!(sum, expected);
            }
            let took = start.elapsed();
            BASELINE.lock().unwrap().push(took / iters as u32);
            took
        })
    });
    group.finish();
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

/// The median per-run time of one side, or `None` when a filter skipped it.
fn median(samples: &Mutex<Vec<Duration>>) -> Option<Duration> {
    let mut v = samples.lock().unwrap().clone();
    v.sort();
    v.get(v.len() / 2).copied()
}

criterion_group!(benches, skein_side, baseline_side);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    let (Some(skein), Some(base)) = (median(&SKEIN), median(&BASELINE)) else {
        println!("dispatch: one side was filtered out; no ratio");
        return;
    };
    let per_s = |d: Duration| ITEMS as f64 / d.as_secs_f64();
    println!(
        "dispatch: skein {:.0} items/s ({:?} per {ITEMS}), baseline {:.0} items/s ({:?}); \
         ratio skein/baseline = {:.2}x (goal >= 1.00x)",
        per_s(skein),
        skein,
        per_s(base),
        base,
        per_s(skein) / per_s(base)
    );
    if let Some(host) = median(&SKEIN_HOST) {
        println!(
            "dispatch (issued from Rust like the baseline): skein {:.0} items/s ({:?}); \
             ratio = {:.2}x",
            per_s(host),
            host,
            per_s(host) / per_s(base)
        );
    }
}
