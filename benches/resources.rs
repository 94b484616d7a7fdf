//! Resources: what a call from one resource into another's export costs, against a
//! plain Luau call of the same function in one VM, in the same run. Goal: at most 2 µs per
//! cross-resource call.
//!
//! Two resources on one pool: `callee` exports `score(t)`, and `caller` depends on it. The
//! argument is a table of 10 fields (numbers, strings, a boolean), made once; `score` reads
//! five of them and answers a number. Each side is a Luau loop of `CALLS` calls in `caller`'s
//! engine VM, timed from Rust around one `domain.eval`:
//!
//! - **cross**: `callee.score(t)` through the proxy of `require("@skein/resources").import`:
//!   the export looked up by name, the table copied out of `caller` and into `callee`, the call
//!   under `callee`'s deadline and authority, the number copied back;
//! - **plain**: the same `score` function, defined in `caller`'s own VM, called directly.
//!
//! Criterion's medians give the ratio at the end, and so do alternating rounds of both sides
//! (`util::alternate`), which a load coming and going on a shared machine hits alike.
//!
//! Instruction counts (not timed): `resources count cross N` and `resources count plain N` run
//! N calls and nothing else, for `valgrind --tool=callgrind`; run each at two counts and divide
//! the difference by the difference of the counts, so set-up cancels out:
//!
//! ```text
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/deps/resources-* count cross 2000
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/deps/resources-* count cross 12000
//! ```

mod util;

use std::time::{Duration, Instant};

use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use skein::capability::Grant;
use skein::resource::ResourceHost;
use skein::{Message, Pool};

/// Calls per timed run: enough that the `eval` around them is noise.
const CALLS: usize = 10_000;

/// Alternating rounds of both sides after criterion's.
const ROUNDS: usize = 9;

/// The function both sides call; `callee` exports it, `caller` keeps its own copy.
const SCORE: &str = "function score(t)\n\
    return t.x + t.y + t.z + t.hp * t.level\n\
end\n";

/// `caller`'s script: the argument, and one loop per side, each answering its sum.
const CALLER: &str = r#"
local callee = require("@skein/resources").import("callee")
local t = {
    id = 7, name = "ada", team = "red", tag = "p7", alive = true,
    x = 1.5, y = 2.5, z = 3.5, hp = 100, level = 12,
}

local function plainScore(t)
    return t.x + t.y + t.z + t.hp * t.level
end

function cross(n)
    local sum = 0
    for _ = 1, n do
        sum += callee.score(t)
    end
    return sum
end

function plain(n)
    local sum = 0
    for _ = 1, n do
        sum += plainScore(t)
    end
    return sum
end
"#;

/// What one call answers: 1.5 + 2.5 + 3.5 + 100 * 12.
const ONE: f64 = 1207.5;

/// A host serving `callee` and `caller` from a temporary folder; the folder lives as long as
/// the host is used.
fn host(pool: &Pool) -> (tempfile::TempDir, ResourceHost) {
    let dir = tempfile::tempdir().expect("tempdir");
    let resource = |name: &str, manifest: &str, main: &str| {
        let folder = dir.path().join(name);
        std::fs::create_dir(&folder).expect("folder");
        std::fs::write(folder.join("skein.toml"), manifest).expect("manifest");
        std::fs::write(folder.join("main.luau"), main).expect("script");
    };
    resource(
        "callee",
        "[resource]\nscripts = ['main.luau']\nexports = ['score']\n",
        SCORE,
    );
    resource(
        "caller",
        "[resource]\nscripts = ['main.luau']\ndependencies = ['callee']\n",
        CALLER,
    );
    let mut host = ResourceHost::load(pool, dir.path(), Grant::default()).expect("load");
    host.start_set(&["callee", "caller"]).expect("start");
    (dir, host)
}

/// Runs `side(n)` in `caller` and checks its sum.
fn run(host: &ResourceHost, side: &str, n: usize) {
    let caller = host.domain("caller").expect("caller runs");
    let sum = caller.eval(&format!("return {side}({n})")).expect("calls");
    assert_eq!(sum, Message::Number(ONE * n as f64), "{side}");
}

/// One timed run of `side`.
fn timed(host: &ResourceHost, side: &str) -> Duration {
    let t = Instant::now();
    run(host, side, CALLS);
    t.elapsed()
}

fn calls(c: &mut Criterion) {
    let pool = Pool::new(1);
    let (_dir, host) = host(&pool);
    run(&host, "cross", 100);
    run(&host, "plain", 100);

    let mut g = util::group(c, "resources", Throughput::Elements(CALLS as u64));
    for (name, side) in [("cross_resource", "cross"), ("plain_luau", "plain")] {
        g.bench_function(BenchmarkId::new(name, CALLS), |b| {
            b.iter_custom(|iters| {
                let t = Instant::now();
                for _ in 0..iters {
                    run(&host, side, CALLS);
                }
                util::keep(name, t.elapsed(), iters)
            })
        });
    }
    g.finish();

    let [cross, plain] = util::alternate(
        ROUNDS,
        [&mut || timed(&host, "cross"), &mut || timed(&host, "plain")],
    );
    let per_call = |times: &[Duration]| {
        let mut v = times.to_vec();
        v.sort();
        v[v.len() / 2] / CALLS as u32
    };
    util::print_rounds(
        "cross-resource vs plain call",
        &util::ratio_per_round(&cross, &plain),
        "the price of copying a 10-field table in and a number out",
    );
    let each = per_call(&cross);
    println!(
        "cross-resource call, {ROUNDS} alternating rounds: median {:.0} ns per call (plain: {:.1} ns); goal <= 2000 ns: {}",
        each.as_secs_f64() * 1e9,
        per_call(&plain).as_secs_f64() * 1e9,
        if each <= Duration::from_micros(2) { "met" } else { "missed" }
    );
}

criterion_group!(benches, calls);

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [count, side, n] = args.as_slice() {
        if count == "count" {
            let pool = Pool::new(1);
            let (_dir, host) = host(&pool);
            run(&host, side, n.parse().expect("a count of calls"));
            return;
        }
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
    util::ratio(
        "cross-resource call (criterion medians)",
        "cross_resource",
        CALLS,
        "plain_luau",
        CALLS,
        "informative; the goal is <= 2 us per cross-resource call",
    );
}
