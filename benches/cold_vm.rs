//! Cold VM: the time from handing the first item to a fresh worker until its entry starts,
//! VM build and prelude included. Each sample makes a new one-thread `Pool` and domain whose plan
//! has a host function `mark()` that records `Instant::now()`; the entry calls it first thing.
//! A worker makes the state its next VM starts from while it is idle (`vm::Spare`); a pool used
//! at once races that, so the bench also times a new domain's first item on a pool that is
//! already running (one pool for all samples, a new domain each).
//!
//! Baselines in the same run: the same measure for a second item on the now-warm worker, and
//! `mlua::Lua::new()` alone. Goal: cold <= 200 us.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use skein::mlua::{Lua, MultiValue};
use skein::{DomainSpec, Message, Plan, Pool, ScriptDomain};

const SAMPLES: usize = 300;
const COLD: &str = "local M = {}\nfunction M.run() mark() return true end\nreturn M\n";

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 10_000_000_000, 3).expect("histogram")
}

fn record(h: &mut Histogram<u64>, d: Duration) {
    h.record((d.as_nanos() as u64).max(1)).expect("record");
}

fn us(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1000.0
}

fn show(name: &str, h: &Histogram<u64>) {
    println!(
        "{name:<34} n={:>4}  p50 {:>8.1} us  p90 {:>8.1} us  p99 {:>8.1} us  min {:>8.1} us",
        h.len(),
        us(h, 0.50),
        us(h, 0.90),
        us(h, 0.99),
        h.min() as f64 / 1000.0
    );
}

/// Dispatches `run` and answers the time from the dispatch until the entry called `mark()`.
fn time_to_entry(domain: &ScriptDomain, marked: &Mutex<Option<Instant>>) -> Duration {
    *marked.lock().unwrap() = None;
    let t0 = Instant::now();
    let r = domain
        .dispatch("./cold", "run", Message::Nil)
        .expect("dispatch")
        .wait()
        .expect("job");
    assert!(matches!(r, Message::Boolean(true)), "entry answered {r:?}");
    let at = marked.lock().unwrap().take().expect("mark() was called");
    at - t0
}

fn main() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("cold.luau"), COLD).expect("write module");
    let root = dir.path().canonicalize().expect("canonical tempdir");

    let mut cold = histogram();
    let mut running = histogram();
    let mut warm = histogram();
    let mut bare = histogram();
    let started = Pool::new(1);
    for _ in 0..SAMPLES {
        let marked: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
        let sink = marked.clone();
        let sink_running = marked.clone();
        let plan = Plan::new()
            .root(root.clone())
            .function("mark", move |_lua, _args| {
                *sink.lock().unwrap() = Some(Instant::now());
                Ok(MultiValue::new())
            });
        let pool = Pool::new(1);
        let domain = ScriptDomain::new(&pool, DomainSpec::new("bench").plan(plan)).expect("domain");
        record(&mut cold, time_to_entry(&domain, &marked));
        record(&mut warm, time_to_entry(&domain, &marked));
        drop(domain);
        drop(pool);

        let plan = Plan::new()
            .root(root.clone())
            .function("mark", move |_lua, _args| {
                *sink_running.lock().unwrap() = Some(Instant::now());
                Ok(MultiValue::new())
            });
        let domain =
            ScriptDomain::new(&started, DomainSpec::new("bench").plan(plan)).expect("domain");
        record(&mut running, time_to_entry(&domain, &marked));
        drop(domain);

        let t0 = Instant::now();
        let lua = Lua::new();
        let took = t0.elapsed();
        drop(lua);
        record(&mut bare, took);
    }
    show("skein cold (new pool, 1st item)", &cold);
    show("skein cold (running pool, new domain)", &running);
    show("skein warm (same worker, 2nd)", &warm);
    show("mlua::Lua::new() alone", &bare);
    let p50 = us(&cold, 0.50);
    let on_running = us(&running, 0.50);
    let met = |p50: f64| if p50 <= 200.0 { "met" } else { "MISSED" };
    println!(
        "cold_vm: p50 cold {p50:.1} us on a new pool ({}), {on_running:.1} us on a running pool \
         ({}) vs warm {:.1} us vs Lua::new() {:.1} us; goal <= 200 us",
        met(p50),
        met(on_running),
        us(&warm, 0.50),
        us(&bare, 0.50),
    );
}
