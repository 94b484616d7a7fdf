//! Round-trip latency: one `jobs.dispatch(...):await()` (dispatch, settle, resume on the engine
//! thread), timed inside Luau with `os.clock()`, beside a bare cross-thread ping-pong with a Lua
//! call at the far end (a thread owning an mlua VM, crossbeam channels, blocking receives).
//!
//! Percentiles come from hdrhistogram. Goal: p50 <= 20 us, p99 <= 100 us.

use std::thread;
use std::time::Instant;

use hdrhistogram::Histogram;
use skein::mlua::{self, Lua};
use skein::{DomainSpec, Message, Plan, Pool, ScriptDomain};

const SAMPLES: usize = 20_000;
const WARMUP: usize = 2_000;
const ECHO: &str = "local M = {}\nfunction M.run(x) return x end\nreturn M\n";

fn histogram() -> Histogram<u64> {
    // Nanoseconds, from 1 ns to 1 s, 3 significant digits.
    Histogram::new_with_bounds(1, 1_000_000_000, 3).expect("histogram")
}

/// Skein: the samples are measured by the engine script itself, in seconds.
fn skein_round_trips() -> Histogram<u64> {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("echo.luau"), ECHO).expect("write module");
    let pool = Pool::new(2);
    let plan = Plan::new().root(dir.path().canonicalize().expect("canonical tempdir"));
    let domain = ScriptDomain::new(&pool, DomainSpec::new("bench").plan(plan)).expect("domain");
    let source = format!(
        r#"
        for i = 1, {WARMUP} do jobs.dispatch("./echo", "run", i):await() end
        local samples = table.create({SAMPLES})
        for i = 1, {SAMPLES} do
            local t0 = os.clock()
            local r = jobs.dispatch("./echo", "run", i):await()
            samples[i] = os.clock() - t0
            assert(r == i)
        end
        return samples
        "#
    );
    let samples = domain.eval(&source).expect("eval");
    let Message::List(samples) = samples else {
        panic!("expected a list of samples, got {samples:?}")
    };
    assert_eq!(samples.len(), SAMPLES);
    let mut h = histogram();
    for s in samples {
        let Message::Number(seconds) = s else {
            panic!("expected a number, got {s:?}")
        };
        h.record((seconds * 1e9).round().max(1.0) as u64)
            .expect("record");
    }
    h
}

/// Baseline: a thread that owns an mlua VM answers each request by calling the same Luau
/// function; the main thread times each send -> call -> receive.
fn ping_pong() -> Histogram<u64> {
    let (req_tx, req_rx) = crossbeam_channel::unbounded::<i64>();
    let (rep_tx, rep_rx) = crossbeam_channel::unbounded::<i64>();
    let far = thread::spawn(move || {
        let lua = Lua::new();
        // Interpreted, as Skein runs a module without `--!native`: Skein builds mlua without
        // `luau-jit`, so this VM has no code generator.
        let module: mlua::Table = lua.load(ECHO).eval().expect("load echo");
        let run: mlua::Function = module.get("run").expect("run");
        while let Ok(x) = req_rx.recv() {
            let r: i64 = run.call(x).expect("call");
            if rep_tx.send(r).is_err() {
                break;
            }
        }
    });
    let mut h = histogram();
    for i in 0..(WARMUP + SAMPLES) as i64 {
        let t0 = Instant::now();
        req_tx.send(i).expect("send");
        let r = rep_rx.recv().expect("reply");
        let took = t0.elapsed();
        assert_eq!(r, i);
        if i >= WARMUP as i64 {
            h.record((took.as_nanos() as u64).max(1)).expect("record");
        }
    }
    drop(req_tx);
    far.join().expect("far thread");
    h
}

fn us(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1000.0
}

fn show(name: &str, h: &Histogram<u64>) {
    println!(
        "{name:<28} n={:>6}  p50 {:>8.2} us  p99 {:>8.2} us  p99.9 {:>8.2} us  max {:>9.2} us",
        h.len(),
        us(h, 0.50),
        us(h, 0.99),
        us(h, 0.999),
        h.max() as f64 / 1000.0
    );
}

fn main() {
    // Criterion-style flags (`--bench`) are passed by cargo; nothing here reads them.
    let skein = skein_round_trips();
    let base = ping_pong();
    show("skein dispatch:await()", &skein);
    show("baseline ping-pong + call", &base);
    let (p50, p99) = (us(&skein, 0.50), us(&skein, 0.99));
    println!(
        "latency: skein/baseline ratio p50 {:.2}x, p99 {:.2}x, p99.9 {:.2}x",
        p50 / us(&base, 0.50),
        p99 / us(&base, 0.99),
        us(&skein, 0.999) / us(&base, 0.999)
    );
    println!(
        "goal p50 <= 20 us: {} ({p50:.2} us); goal p99 <= 100 us: {} ({p99:.2} us)",
        if p50 <= 20.0 { "met" } else { "MISSED" },
        if p99 <= 100.0 { "met" } else { "MISSED" }
    );
}
