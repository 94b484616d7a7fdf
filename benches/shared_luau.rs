//! Shared tables from Luau: `t.x += 1` on a shared table, `jobs.shared.atomic` increments and
//! `jobs.shared.add(t, "x", 1)` increments, each from 2 workers at once (one `parallelFor` of 2
//! chunks, `OPS` updates per chunk), beside the same `2 * OPS` updates to a plain local table in
//! one worker VM: what sharing costs. Goals, shared on 2 workers over local in one VM:
//! `t.x += 1` >= 1/8, `atomic` >= 1/15, `add` >= 1/6; each goal's line says whether this run met
//! it.
//!
//! Where the domain has no `jobs.shared.add` (a build before the Luau side of it), the `add`
//! sides are left out with a printed note and everything else runs.
//!
//! Both sides are timed from Rust around one `domain.eval` (dispatch and await included, a few
//! microseconds against tens of milliseconds); the ratios of the medians of ops/second are
//! printed at the end. `t.x += 1` from two VMs is a read then a write, so updates may be lost
//! there; the `atomic` side checks that none is.

mod util;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use skein::{DomainSpec, Message, Plan, Pool, ScriptDomain};
use util::Goal;

/// Updates per chunk (one chunk per worker).
const OPS: usize = 50_000;
const WORKERS: usize = 2;

const MODULE: &str = r#"
local M = {}

local function inc(n) return n + 1 end

function M.plus(c)
    local t = jobs.shared.table(c.args.name)
    for _ = 1, c.count do
        t.x += 1
    end
    return c.count
end

function M.atomic(c)
    local t = jobs.shared.table(c.args.name)
    local atomic = jobs.shared.atomic
    for _ = 1, c.count do
        atomic(t, "x", inc)
    end
    return c.count
end

function M.add(c)
    local t = jobs.shared.table(c.args.name)
    local add = jobs.shared.add
    for _ = 1, c.count do
        add(t, "x", 1)
    end
    return c.count
end

function M.plain(c)
    local t = { x = 0 }
    for _ = 1, c.count do
        t.x += 1
    end
    assert(t.x == c.count)
    return c.count
end

return M
"#;

/// A chunk that resets `x` of the named shared table, runs `entry` over `total` updates cut into
/// `chunks`, and answers the value of `x` after.
fn run(entry: &str, total: usize, chunks: usize) -> String {
    format!(
        r#"
        local t = jobs.shared.table("counter")
        t.x = 0
        jobs.parallelFor("./bump", "{entry}", {total}, {{ name = "counter" }}, {{ chunks = {chunks} }}):await()
        return t.x
        "#
    )
}

fn as_int(m: &Message) -> i64 {
    match m {
        Message::Integer(i) => *i,
        Message::Number(n) => *n as i64,
        other => panic!("expected a number, got {other:?}"),
    }
}

/// Printed in place of the `add` sides when the domain has no `jobs.shared.add`.
const NO_ADD: &str =
    "note: this build has no jobs.shared.add; the add sides are skipped (they need its Luau side)";

/// Set when the `add` sides were skipped, so `main` leaves out their ratios.
static ADD_MISSING: AtomicBool = AtomicBool::new(false);

/// Whether Luau code in `domain` can call `jobs.shared.add`.
fn has_add(domain: &ScriptDomain) -> bool {
    let probe = "local ok, add = pcall(function() return jobs.shared.add end)\n\
                 return ok and type(add) == 'function'";
    matches!(domain.eval(probe), Ok(Message::Boolean(true)))
}

fn luau(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("bump.luau"), MODULE).expect("write module");
    let pool = Pool::new(WORKERS);
    let plan = Plan::new().root(dir.path().canonicalize().expect("canonical tempdir"));
    let domain = ScriptDomain::new(&pool, DomainSpec::new("bench").plan(plan)).expect("domain");
    let total = WORKERS * OPS;
    // Build both worker VMs before anything is timed.
    domain.eval(&run("plain", 2, 2)).expect("warm");

    let mut g = util::group(c, "shared_luau", Throughput::Elements(total as u64));
    // The 1-chunk shared sides run the same updates in one worker VM with nobody contending:
    // beside the 2-worker figures they split the cost of sharing into the per-update price and
    // what contention adds.
    let mut sides = vec![
        ("shared_plus_2w", "plus", WORKERS),
        ("shared_atomic_2w", "atomic", WORKERS),
        ("shared_plus_1vm", "plus", 1),
        ("shared_atomic_1vm", "atomic", 1),
        ("local_plain_1vm", "plain", 1),
    ];
    let add = has_add(&domain);
    ADD_MISSING.store(!add, Ordering::Relaxed);
    if add {
        sides.push(("shared_add_2w", "add", WORKERS));
        sides.push(("shared_add_1vm", "add", 1));
    } else {
        println!("{NO_ADD}");
    }
    for (name, entry, chunks) in sides {
        let source = run(entry, total, chunks);
        g.bench_function(BenchmarkId::new(name, total), |b| {
            b.iter_custom(|iters| {
                let t0 = Instant::now();
                for _ in 0..iters {
                    let x = as_int(&domain.eval(&source).expect("eval"));
                    match entry {
                        "atomic" => assert_eq!(x, total as i64, "an atomic update was lost"),
                        "add" => assert_eq!(x, total as i64, "an add was lost"),
                        "plus" if chunks == 1 => assert_eq!(x, total as i64),
                        "plus" => assert!(x > 0 && x <= total as i64, "x = {x}"),
                        _ => assert_eq!(x, 0, "the plain side must not touch the shared table"),
                    }
                }
                util::keep(name, t0.elapsed(), iters)
            })
        });
    }
    g.finish();

    // How one more run of the plain increments went: how many updates two VMs lost, and
    // whether both workers took a chunk.
    let before = pool.stats();
    let x = as_int(&domain.eval(&run("plus", total, WORKERS)).expect("eval"));
    // A worker adds its busy time after the item's round, which can end just after the
    // promise settled: give it a moment.
    std::thread::sleep(std::time::Duration::from_millis(50));
    let after = pool.stats();
    println!(
        "t.x += 1 from 2 workers: {x} of {total} updates kept ({} lost to the read-then-write race)",
        total as i64 - x
    );
    for (b, a) in before.iter().zip(&after) {
        println!(
            "  worker {}: items {}, busy {:.1?} in that run",
            a.worker,
            a.items_run - b.items_run,
            a.busy - b.busy
        );
    }
}

criterion_group!(benches, luau);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    let total = WORKERS * OPS;
    println!("--- shared_luau (ratios of medians, this run; 'cost of sharing' = 1 / ratio) ---");
    let goals = [
        (
            "t.x += 1",
            "shared_plus_2w",
            Goal::at_least(1.0 / 8.0, "1/8"),
        ),
        (
            "atomic",
            "shared_atomic_2w",
            Goal::at_least(1.0 / 15.0, "1/15"),
        ),
        ("add", "shared_add_2w", Goal::at_least(1.0 / 6.0, "1/6")),
    ];
    let add_missing = ADD_MISSING.load(Ordering::Relaxed);
    for (label, name, goal) in goals {
        if add_missing && name.contains("add") {
            println!("{label}: {NO_ADD}");
            continue;
        }
        let label = format!("{label}, shared on 2 workers over local in 1 VM");
        util::ratio_goal(&label, name, total, "local_plain_1vm", total, goal);
    }
    util::ratio(
        "t.x += 1, uncontended",
        "shared_plus_1vm",
        total,
        "local_plain_1vm",
        total,
        "shared in 1 VM over local in 1 VM",
    );
    util::ratio(
        "atomic, uncontended",
        "shared_atomic_1vm",
        total,
        "local_plain_1vm",
        total,
        "shared in 1 VM over local in 1 VM",
    );
    util::ratio(
        "t.x += 1 scaling",
        "shared_plus_2w",
        total,
        "shared_plus_1vm",
        total,
        "2 workers over 1",
    );
    util::ratio(
        "atomic scaling",
        "shared_atomic_2w",
        total,
        "shared_atomic_1vm",
        total,
        "2 workers over 1",
    );
    util::ratio(
        "atomic vs +=",
        "shared_atomic_2w",
        total,
        "shared_plus_2w",
        total,
        "informative",
    );
    if add_missing {
        return;
    }
    util::ratio(
        "add, uncontended",
        "shared_add_1vm",
        total,
        "local_plain_1vm",
        total,
        "shared in 1 VM over local in 1 VM",
    );
    util::ratio(
        "add scaling",
        "shared_add_2w",
        total,
        "shared_add_1vm",
        total,
        "2 workers over 1",
    );
    util::ratio(
        "add vs atomic",
        "shared_add_2w",
        total,
        "shared_atomic_2w",
        total,
        "what the numeric fast path saves over a function call",
    );
}
