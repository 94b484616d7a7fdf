//! What the benches have in common: every measure keeps its per-iteration times (warm-up
//! included) under a name, so `main` can print ratios of medians taken in the same run; and the
//! chunks `parallelFor` cuts, for the baselines that cut the same way.

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
    let r = ra / rb;
    let shown = if r < 0.1 {
        format!("{r:.4}x, i.e. 1/{:.1}", 1.0 / r)
    } else {
        format!("{r:.2}x")
    };
    println!(
        "{label}: {name} {} ({:.1} ns/op) vs {base} {} ({:.1} ns/op): ratio {shown} ({goal})",
        human(ra),
        1e9 / ra,
        human(rb),
        1e9 / rb,
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

/// CPU time the calling thread has used so far. On a loaded machine a thread's CPU time per
/// operation shows contention (cache lines bouncing, lock waits spun) where wall time mostly
/// shows the other loads.
pub fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call, and
    // CLOCK_THREAD_CPUTIME_ID is supported on every Linux this bench runs on.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The chunks as `parallelFor` cuts them: `(index, first, last)`, the first `n % chunks` runs one
/// longer than the rest.
pub fn split(n: usize, chunks: usize) -> Vec<(usize, usize, usize)> {
    let (base, extra) = (n / chunks, n % chunks);
    let mut first = 1;
    (1..=chunks)
        .map(|index| {
            let len = base + usize::from(index <= extra);
            let run = (index, first, first + len - 1);
            first += len;
            run
        })
        .collect()
}
