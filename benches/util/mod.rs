//! What the shared-state benches have in common: every measure keeps its per-iteration times
//! (warm-up included) under a name, so `main` can print ratios of medians taken in the same run.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, SamplingMode, Throughput};

/// Per-iteration durations by measure name.
static SAMPLES: Mutex<BTreeMap<&'static str, Vec<Duration>>> = Mutex::new(BTreeMap::new());

/// Records `took` over `iters` iterations under `name`, and answers `took` for criterion.
pub fn keep(name: &'static str, took: Duration, iters: u64) -> Duration {
    SAMPLES
        .lock()
        .unwrap()
        .entry(name)
        .or_default()
        .push(took / iters as u32);
    took
}

/// The median per-iteration time of `name`, or `None` when a filter skipped it.
pub fn median(name: &str) -> Option<Duration> {
    let samples = SAMPLES.lock().unwrap();
    let mut v = samples.get(name)?.clone();
    v.sort();
    v.get(v.len() / 2).copied()
}

/// A group with the settings every shared-state bench uses: few, flat samples, so one bench
/// stays within a couple of minutes on a 2-core machine.
pub fn group<'a>(
    c: &'a mut Criterion,
    name: &str,
    throughput: Throughput,
) -> BenchmarkGroup<'a, WallTime> {
    let mut g = c.benchmark_group(name);
    g.sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .throughput(throughput);
    g
}

/// Operations per second of `ops` operations taking `d`.
pub fn per_s(ops: usize, d: Duration) -> f64 {
    ops as f64 / d.as_secs_f64()
}

/// Prints one comparison: `name` against `base`, both as operations per second over `ops`
/// (`base_ops` for the baseline), with the goal the ratio is held to.
pub fn ratio(label: &str, name: &str, ops: usize, base: &str, base_ops: usize, goal: &str) {
    let (Some(a), Some(b)) = (median(name), median(base)) else {
        println!("{label}: a side was filtered out; no ratio");
        return;
    };
    let (ra, rb) = (per_s(ops, a), per_s(base_ops, b));
    println!(
        "{label}: {name} {} ({:.1} ns/op) vs {base} {} ({:.1} ns/op): ratio {:.2}x ({goal})",
        human(ra),
        1e9 / ra,
        human(rb),
        1e9 / rb,
        ra / rb
    );
}

/// A rate with a unit, e.g. `12.3 M ops/s`.
pub fn human(rate: f64) -> String {
    if rate >= 1e6 {
        format!("{:.2} M ops/s", rate / 1e6)
    } else if rate >= 1e3 {
        format!("{:.1} k ops/s", rate / 1e3)
    } else {
        format!("{rate:.1} ops/s")
    }
}
