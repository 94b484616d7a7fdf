//! What the benches have in common: every measure keeps its per-iteration times (warm-up
//! included) under a name, so `main` can print ratios of medians taken in the same run; sides run
//! in alternating rounds, so a change of load on a shared machine falls on every side of a ratio
//! alike; and the chunks `parallelFor` cuts, for the baselines that cut the same way.

#![allow(dead_code)]

pub mod baseline;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, SamplingMode, Throughput};
use skein::{DomainSpec, MapKey, Plan, Pool, ScriptDomain};

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

/// A bound a ratio from [`ratio`] is held to: `at_least(2.0, "2x")` or `at_most(1.2, "1.2x")`,
/// the text as the goal is written down.
#[derive(Clone, Copy, Debug)]
pub struct Goal {
    bound: f64,
    at_most: bool,
    text: &'static str,
}

impl Goal {
    /// The ratio must be `bound` or more.
    pub const fn at_least(bound: f64, text: &'static str) -> Goal {
        Goal {
            bound,
            at_most: false,
            text,
        }
    }

    /// The ratio must be `bound` or less.
    pub const fn at_most(bound: f64, text: &'static str) -> Goal {
        Goal {
            bound,
            at_most: true,
            text,
        }
    }

    fn met(&self, r: f64) -> bool {
        if self.at_most {
            r <= self.bound
        } else {
            r >= self.bound
        }
    }
}

/// The throughput of `name` (`ops` a run) over that of `base` (`base_ops` a run), from their
/// medians; `None` when a filter skipped either side.
pub fn ratio_of(name: &str, ops: usize, base: &str, base_ops: usize) -> Option<f64> {
    let (a, b) = (median(name)?, median(base)?);
    Some(per_s(ops, a) / per_s(base_ops, b))
}

/// [`ratio`] held to `goal`: the line ends `(goal >= 2x: met)` or `(goal >= 2x: NOT met)`.
pub fn ratio_goal(label: &str, name: &str, ops: usize, base: &str, base_ops: usize, goal: Goal) {
    let verdict = match ratio_of(name, ops, base, base_ops) {
        Some(r) if goal.met(r) => "met",
        Some(_) => "NOT met",
        None => "no ratio",
    };
    let sign = if goal.at_most { "<=" } else { ">=" };
    let text = format!("goal {sign} {}: {verdict}", goal.text);
    ratio(label, name, ops, base, base_ops, &text);
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

/// Runs `rounds` rounds in which every side runs once, and answers each side's times, round by
/// round. Each side answers the time of its one run. The order turns round every other round
/// (A B, B A, A B ...), so that no side always runs right after the same other side (after its
/// garbage, its parked threads, its warm caches).
///
/// A criterion group runs one side for seconds before the next starts, so a load that comes and
/// goes on a shared machine can land on one side only; within a round the sides run
/// back to back, so a ratio taken within a round sees nearly the same machine on both sides.
pub fn alternate<const N: usize>(
    rounds: usize,
    sides: [&mut dyn FnMut() -> Duration; N],
) -> [Vec<Duration>; N] {
    let mut times: [Vec<Duration>; N] = std::array::from_fn(|_| Vec::with_capacity(rounds));
    for round in 0..rounds {
        for step in 0..N {
            let side = if round % 2 == 0 { step } else { N - 1 - step };
            times[side].push(sides[side]());
        }
    }
    times
}

/// The throughput of `a` over that of `b`, round by round: `b`'s time over `a`'s, for two sides
/// that do the same work (scale with [`ratio_per_round_of`] when they do not).
pub fn ratio_per_round(a: &[Duration], b: &[Duration]) -> Vec<f64> {
    ratio_per_round_of(a, 1, b, 1)
}

/// The throughput of `a` (`a_ops` operations a run) over that of `b` (`b_ops` a run), round by
/// round.
pub fn ratio_per_round_of(a: &[Duration], a_ops: usize, b: &[Duration], b_ops: usize) -> Vec<f64> {
    a.iter()
        .zip(b)
        .map(|(a, b)| per_s(a_ops, *a) / per_s(b_ops, *b))
        .collect()
}

/// The median of some ratios (the upper one of the middle two for an even count, as [`median`]
/// does for times).
pub fn median_ratio(ratios: &[f64]) -> f64 {
    let mut v = ratios.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Prints one line: each round's ratio and their median, e.g.
/// `keyed/unkeyed throughput, 6 alternating rounds: 0.62x 0.69x ...; median 0.66x (note)`.
pub fn print_rounds(label: &str, ratios: &[f64], note: &str) {
    let each: Vec<String> = ratios.iter().map(|r| format!("{r:.2}x")).collect();
    println!(
        "{label}, {} alternating rounds: {}; median {:.2}x ({note})",
        ratios.len(),
        each.join(" "),
        median_ratio(ratios)
    );
}

/// `n` string keys `key0`, `key1` ... as names and as `MapKey`s over static bytes, so a get with
/// one copies no key and bumps no shared reference count: what is timed or counted is the table,
/// not the key's allocation.
pub fn static_keys(n: usize) -> (Vec<&'static str>, Vec<MapKey>) {
    let names: Vec<&'static str> = (0..n)
        .map(|i| &*Box::leak(format!("key{i}").into_boxed_str()))
        .collect();
    let keys = names
        .iter()
        .map(|n| MapKey::String(Bytes::from_static(n.as_bytes())))
        .collect();
    (names, keys)
}

/// A module whose `run` answers its argument: the item of the dispatch benches.
pub const ECHO: &str = "local M = {}\nfunction M.run(x) return x end\nreturn M\n";

/// A pool and a domain whose plan root is a temporary folder holding one module.
pub struct ModuleDomain {
    // Fields drop in order: the domain before its pool, the folder last.
    pub domain: ScriptDomain,
    pub pool: Pool,
    _root: tempfile::TempDir,
}

/// A pool of `workers` and a domain `name` whose root holds `file` with `source`, so
/// `jobs.dispatch("./<file's stem>", ...)` reaches it.
pub fn module_domain(name: &str, workers: usize, file: &str, source: &str) -> ModuleDomain {
    let root = tempfile::tempdir().expect("tempdir");
    std::fs::write(root.path().join(file), source).expect("write module");
    let pool = Pool::new(workers);
    let plan = Plan::new().root(root.path().canonicalize().expect("canonical tempdir"));
    let domain = ScriptDomain::new(&pool, DomainSpec::new(name).plan(plan)).expect("domain");
    ModuleDomain {
        domain,
        pool,
        _root: root,
    }
}

/// The Luau of a dispatch run: `n` dispatches of `./echo`'s `run` from one loop, then an await of
/// each, answering the sum (`n (n + 1) / 2`).
pub fn echo_loop(n: usize) -> String {
    format!(
        r#"
        local n = {n}
        local ps = table.create(n)
        for i = 1, n do ps[i] = jobs.dispatch("./echo", "run", i) end
        local sum = 0
        for i = 1, n do sum += ps[i]:await() end
        return sum
        "#
    )
}

/// [`echo_loop`] with an options table on every dispatch: `tables` tables made once before the
/// loop by `option` (a Luau expression of `k`, 0 to `tables - 1`), passed in turn.
pub fn echo_loop_with_options(n: usize, tables: usize, option: &str) -> String {
    format!(
        r#"
        local opts = table.create({tables})
        for k = 0, {tables} - 1 do opts[k + 1] = {option} end
        local n = {n}
        local ps = table.create(n)
        for i = 1, n do ps[i] = jobs.dispatch("./echo", "run", i, opts[i % {tables} + 1]) end
        local sum = 0
        for i = 1, n do sum += ps[i]:await() end
        return sum
        "#
    )
}

/// The Luau of a map run: a list of `1..n` made in Luau, one `jobs.map` of `./echo`'s `run` over
/// it, awaited, and the sum of the results (`n (n + 1) / 2`).
pub fn echo_map(n: usize) -> String {
    format!(
        r#"
        local n = {n}
        local list = table.create(n)
        for i = 1, n do list[i] = i end
        local out = jobs.map("./echo", "run", list):await()
        local sum = 0
        for i = 1, n do sum += out[i] end
        return sum
        "#
    )
}
