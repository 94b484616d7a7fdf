//! Data-parallel scaling: a CPU-bound Luau kernel (Mandelbrot, 800x600, at most 200 iterations a
//! pixel, each chunk answering the iterations it counted over its rows) cut into the same chunks
//! and run four ways in one process:
//!
//! - `plain_mlua`: serially in one plain `mlua::Lua` on this thread, one call per chunk, no Skein;
//! - `plain_mlua_noop_interrupt` (diagnostic): the same with a raw Luau interrupt that does
//!   nothing, which prices the hook a Skein VM carries only once a run must stop;
//! - `skein_1`: `jobs.parallelFor` on `Pool::new(1)`;
//! - `skein_2`: `jobs.parallelFor` on `Pool::new(2)`;
//! - `rayon_mlua`: what a user would hand-roll, a 2-thread rayon pool with `par_iter` over the
//!   chunks and a thread-local `mlua::Lua` per thread holding the kernel, loaded once.
//!
//! Each side is timed with criterion's `iter_custom`; the medians give three ratios, printed at
//! the end: 2 workers over 1 worker (goal >= 1.9x throughput), 1 worker over plain mlua (goal
//! <= 1.03x in time) and 2 workers over rayon (goal >= 1.0x throughput). The same ratios from
//! each side's fastest run follow, as a check on a machine other work is disturbing.
//!
//! Then a table of per-worker efficiency: each worker's share of the pool's throughput over
//! plain mlua's serial throughput (1.00 is a worker as fast as one plain VM on one thread). On a
//! machine with more than 2 cores, `skein_4`, `skein_8`, ... up to its core count (and the
//! count itself) run too and extend the table, so `docs/performance.md`'s scaling estimate can
//! be checked there.

mod util;

use std::cell::RefCell;
use std::ffi::c_int;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use util::split;

use criterion::{criterion_group, BenchmarkId, Criterion, SamplingMode, Throughput};
use rayon::prelude::*;
use skein::mlua::{self, ffi, Lua};
use skein::{DomainSpec, Message, Plan, Pool, ScriptDomain};

const WIDTH: usize = 800;
const HEIGHT: usize = 600;
/// Chunks of rows on every side; 24 divides the 600 rows evenly, and a dozen chunks per worker
/// lets the uneven rows (the set's middle costs the most) balance between two workers.
const CHUNKS: usize = 24;
const KERNEL: &str = r#"
local M = {}
local WIDTH, HEIGHT, MAX_ITER = 800, 600, 200

-- Counts the escape iterations of every pixel in rows c.first..c.last (1-based).
function M.rows(c)
    local total = 0
    for y = c.first, c.last do
        local ci = (y - 1) / HEIGHT * 2.4 - 1.2
        for x = 0, WIDTH - 1 do
            local cr = x / WIDTH * 3.5 - 2.5
            local zr, zi, n = 0, 0, 0
            while n < MAX_ITER and zr * zr + zi * zi <= 4 do
                zr, zi = zr * zr - zi * zi + cr, 2 * zr * zi + ci
                n += 1
            end
            total += n
        end
    end
    return total
end

return M
"#;

static PLAIN: Mutex<Vec<Duration>> = Mutex::new(Vec::new());
static PLAIN_HOOKED: Mutex<Vec<Duration>> = Mutex::new(Vec::new());
static SKEIN_1: Mutex<Vec<Duration>> = Mutex::new(Vec::new());
static SKEIN_2: Mutex<Vec<Duration>> = Mutex::new(Vec::new());
static RAYON: Mutex<Vec<Duration>> = Mutex::new(Vec::new());
/// One side's per-run times.
type Samples = Mutex<Vec<Duration>>;
/// The sides past 2 workers a machine with more cores runs: worker count, per-run times.
static WIDER: Mutex<Vec<(usize, &'static Samples)>> = Mutex::new(Vec::new());

/// The worker counts past 2 this machine runs: powers of two up to its core count, and the
/// count itself.
fn wider_counts() -> Vec<usize> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut counts: Vec<usize> = (2..)
        .map(|k| 1usize << k)
        .take_while(|&n| n <= cores)
        .collect();
    if cores > 2 && counts.last() != Some(&cores) {
        counts.push(cores);
    }
    counts
}

/// A plain VM with the kernel loaded, answering its `rows` entry.
fn plain_kernel() -> (Lua, mlua::Function) {
    kernel_vm(false)
}

/// An interrupt that does nothing: what Luau's interrupt hook costs, apart from Skein's callback.
unsafe extern "C-unwind" fn noop_interrupt(_state: *mut ffi::lua_State, _gc: c_int) {}

/// A plain VM with the kernel loaded; with `hook`, a no-op raw interrupt is installed, as a
/// Skein worker VM always has one for its deadlines.
fn kernel_vm(hook: bool) -> (Lua, mlua::Function) {
    let lua = Lua::new();
    // Interpreted, as Skein runs a module without `--!native`: Skein builds mlua without
    // `luau-jit`, so this VM has no code generator.
    if hook {
        // SAFETY: `lua_callbacks` answers the callbacks of this VM's global state, valid while
        // `lua` lives; only the `interrupt` slot is replaced, mlua's own interrupt is never set
        // on this VM, and the VM stays on this thread.
        unsafe {
            (*ffi::lua_callbacks(lua.state())).interrupt = Some(noop_interrupt);
        }
    }
    let module: mlua::Table = lua.load(KERNEL).eval().expect("load kernel");
    let rows: mlua::Function = module.get("rows").expect("rows");
    (lua, rows)
}

/// Calls the kernel on one chunk with the table `parallelFor` would pass it.
fn call_chunk(
    lua: &Lua,
    rows: &mlua::Function,
    (index, first, last): (usize, usize, usize),
) -> f64 {
    let c = lua.create_table().expect("table");
    c.set("index", index).expect("set");
    c.set("count", last - first + 1).expect("set");
    c.set("first", first).expect("set");
    c.set("last", last).expect("set");
    rows.call::<f64>(c).expect("kernel")
}

thread_local! {
    /// The hand-rolled worker VM: built once per rayon thread, with the kernel loaded once.
    static VM: RefCell<Option<(Lua, mlua::Function)>> = const { RefCell::new(None) };
}

fn rayon_chunk(chunk: (usize, usize, usize)) -> f64 {
    VM.with(|slot| {
        let mut slot = slot.borrow_mut();
        let (lua, rows) = slot.get_or_insert_with(plain_kernel);
        call_chunk(lua, rows, chunk)
    })
}

/// One pool, a domain over a folder holding the kernel, and the Luau that runs it.
struct SkeinSide {
    _dir: tempfile::TempDir,
    pool: Pool,
    domain: ScriptDomain,
}

impl SkeinSide {
    fn new(workers: usize) -> SkeinSide {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("kernel.luau"), KERNEL).expect("write module");
        let pool = Pool::new(workers);
        let plan = Plan::new().root(dir.path().canonicalize().expect("canonical tempdir"));
        let name = format!("scaling{workers}");
        let domain = ScriptDomain::new(&pool, DomainSpec::new(name).plan(plan)).expect("domain");
        SkeinSide {
            _dir: dir,
            pool,
            domain,
        }
    }

    fn run(&self) -> f64 {
        let source = format!(
            r#"
            local parts = jobs.parallelFor("./kernel", "rows", {HEIGHT}, nil, {{ chunks = {CHUNKS} }}):await()
            assert(#parts == {CHUNKS})
            local total = 0
            for _, p in parts do total += p end
            return total
            "#
        );
        number(&self.domain.eval(&source).expect("eval"))
    }
}

fn number(m: &Message) -> f64 {
    match m {
        Message::Number(n) => *n,
        Message::Integer(i) => *i as f64,
        other => panic!("expected a number, got {other:?}"),
    }
}

/// Times `iters` runs of `run`, checks each answer, and keeps the per-run time in `into`.
fn timed(
    iters: u64,
    into: &Mutex<Vec<Duration>>,
    expected: f64,
    mut run: impl FnMut() -> f64,
) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        assert_eq!(run(), expected);
    }
    let took = start.elapsed();
    into.lock().unwrap().push(took / iters as u32);
    took
}

fn scaling(c: &mut Criterion) {
    let chunks = split(HEIGHT, CHUNKS);
    let (lua, rows) = plain_kernel();
    let (hooked_lua, hooked_rows) = kernel_vm(true);
    let expected: f64 = chunks.iter().map(|&ch| call_chunk(&lua, &rows, ch)).sum();
    let one = SkeinSide::new(1);
    let two = SkeinSide::new(2);
    let wider: Vec<(usize, SkeinSide)> = wider_counts()
        .into_iter()
        .map(|n| (n, SkeinSide::new(n)))
        .collect();
    let rayon_pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .expect("rayon pool");

    let mut group = c.benchmark_group("scaling");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .throughput(Throughput::Elements((WIDTH * HEIGHT) as u64));
    let id = |name: &str| BenchmarkId::new(name, format!("{WIDTH}x{HEIGHT}/{CHUNKS}chunks"));
    group.bench_function(id("plain_mlua"), |b| {
        b.iter_custom(|iters| {
            timed(iters, &PLAIN, expected, || {
                chunks.iter().map(|&ch| call_chunk(&lua, &rows, ch)).sum()
            })
        })
    });
    group.bench_function(id("plain_mlua_noop_interrupt"), |b| {
        b.iter_custom(|iters| {
            timed(iters, &PLAIN_HOOKED, expected, || {
                chunks
                    .iter()
                    .map(|&ch| call_chunk(&hooked_lua, &hooked_rows, ch))
                    .sum()
            })
        })
    });
    group.bench_function(id("skein_1"), |b| {
        b.iter_custom(|iters| timed(iters, &SKEIN_1, expected, || one.run()))
    });
    group.bench_function(id("skein_2"), |b| {
        b.iter_custom(|iters| timed(iters, &SKEIN_2, expected, || two.run()))
    });
    for (workers, side) in &wider {
        let samples: &'static Samples = Box::leak(Box::new(Mutex::new(Vec::new())));
        WIDER.lock().unwrap().push((*workers, samples));
        group.bench_function(id(&format!("skein_{workers}")), |b| {
            b.iter_custom(|iters| timed(iters, samples, expected, || side.run()))
        });
    }
    group.bench_function(id("rayon_mlua"), |b| {
        b.iter_custom(|iters| {
            timed(iters, &RAYON, expected, || {
                rayon_pool.install(|| {
                    let parts: Vec<f64> = chunks.par_iter().map(|&ch| rayon_chunk(ch)).collect();
                    parts.iter().sum()
                })
            })
        })
    });
    group.finish();
    // How the chunks spread: with 24 chunks, 2 workers should share the busy time about evenly.
    let sides = [(1, &one), (2, &two)]
        .into_iter()
        .chain(wider.iter().map(|(n, side)| (*n, side)));
    for (workers, side) in sides {
        println!("scaling: Pool::new({workers}) after its runs:");
        for w in side.pool.stats() {
            println!(
                "  worker {}: items {}, steals {}, sleeps {}, busy {:.1?}",
                w.worker, w.items_run, w.steals, w.sleeps, w.busy
            );
        }
    }
}

/// The median per-run time of one side, or `None` when a filter skipped it.
fn median(samples: &Mutex<Vec<Duration>>) -> Option<Duration> {
    let mut v = samples.lock().unwrap().clone();
    v.sort();
    v.get(v.len() / 2).copied()
}

/// The fastest per-run time of one side: on a shared machine, the run least disturbed by others.
fn fastest(samples: &Mutex<Vec<Duration>>) -> Option<Duration> {
    samples.lock().unwrap().iter().min().copied()
}

/// Prints each side's time and the three ratios, from the per-run times `pick` chooses.
fn report(label: &str, pick: fn(&Mutex<Vec<Duration>>) -> Option<Duration>) {
    let sides = [
        ("plain mlua, serial", pick(&PLAIN)),
        ("skein, 1 worker", pick(&SKEIN_1)),
        ("skein, 2 workers", pick(&SKEIN_2)),
        ("rayon + mlua, 2 threads", pick(&RAYON)),
    ];
    println!("scaling ({label} run of each side):");
    for (name, m) in sides {
        if let Some(d) = m {
            println!(
                "  {name}: {:.1} ms per frame ({:.2} Mpixel/s)",
                d.as_secs_f64() * 1e3,
                (WIDTH * HEIGHT) as f64 / d.as_secs_f64() / 1e6
            );
        }
    }
    let [(_, plain), (_, one), (_, two), (_, rayon)] = sides;
    if let (Some(one), Some(two)) = (one, two) {
        println!(
            "  2 workers / 1 worker throughput = {:.2}x (goal >= 1.90x)",
            one.as_secs_f64() / two.as_secs_f64()
        );
    }
    if let (Some(plain), Some(one)) = (plain, one) {
        println!(
            "  1 worker / plain mlua time = {:.3}x (goal <= 1.03x)",
            one.as_secs_f64() / plain.as_secs_f64()
        );
    }
    if let (Some(plain), Some(hooked)) = (plain, pick(&PLAIN_HOOKED)) {
        println!(
            "  (diagnostic) plain mlua with a no-op interrupt: {:.1} ms, {:.3}x plain's time",
            hooked.as_secs_f64() * 1e3,
            hooked.as_secs_f64() / plain.as_secs_f64()
        );
    }
    if let (Some(two), Some(rayon)) = (two, rayon) {
        println!(
            "  versus rayon: skein 2 workers / rayon 2 threads throughput = {:.2}x (goal >= 1.00x)",
            rayon.as_secs_f64() / two.as_secs_f64()
        );
    }
    let Some(plain) = plain else { return };
    println!(
        "  per-worker efficiency (a worker's share of the throughput over plain mlua's serial):"
    );
    println!("    workers  ms per frame  efficiency");
    let mut rows = vec![(1, one), (2, two)];
    for (workers, samples) in WIDER.lock().unwrap().iter() {
        rows.push((*workers, pick(samples)));
    }
    for (workers, time) in rows {
        if let Some(time) = time {
            let efficiency = plain.as_secs_f64() / time.as_secs_f64() / workers as f64;
            println!(
                "    {workers:>7}  {:>12.1}  {efficiency:>10.2}",
                time.as_secs_f64() * 1e3
            );
        }
    }
}

criterion_group!(benches, scaling);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    report("median", median);
    report("fastest", fastest);
}
