//! Shared tables from Rust: `SharedTableRef` get, set, `atomic` and `add` beside `Mutex<HashMap>`
//! and `RwLock<HashMap>` holding the same 1,000 string keys and `Message` values.
//!
//! Measures: uncontended get and set on one thread; reads of one hot table from 1 and from 2
//! threads at once (reads should scale: they take no lock); an increment of one key from 2
//! threads at once, by `atomic` (a closure) and by `add` (the numeric fast path), each against
//! the mutex read-modify-write run in its own group. Each side is timed with criterion's
//! `iter_custom` and the ratios of the medians are printed at the end. Goals: reads on
//! 2 threads >= 2x `RwLock<HashMap>`; `set` of an existing key >= 0.5x the mutex; the contended
//! `atomic` >= 1.0x and the contended `add` >= 2.0x the mutex. Each goal's line says whether this
//! run met it. A filter runs one group with its baseline, e.g. `cargo bench --bench
//! shared_native -- shared_native_add`.
//!
//! A fourth read side, `arcswap`, reads an `ArcSwap<HashMap>`: a table published the way Skein
//! publishes a shared table's versions (`arc_swap::ArcSwap`, one `load` per get, no lock and no
//! shared counter on the read path), so it separates what the publication model gives from
//! what Skein's own lookup costs. A fifth, `private`, gives each thread its own unshared
//! `HashMap`: it is the control for what running a second thread costs on this machine when
//! nothing is shared.
//!
//! Keys are built once as `MapKey`s over static bytes, so a get copies no key and bumps no
//! shared reference count: what is timed is the table, not the key's allocation.

mod util;

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::{Barrier, Mutex, RwLock};
use std::thread;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use bytes::Bytes;
use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use skein::shared::SharedTableRef;
use skein::{DomainSpec, MapKey, Message, Pool, ScriptDomain};

/// Keys in the hot table.
const KEYS: usize = 1_000;
/// Gets or sets per thread per iteration.
const OPS: usize = 200_000;
/// `atomic` increments per thread per iteration.
const ATOMICS: usize = 50_000;
const COUNTER: &str = "counter";

struct Fixture {
    keys: Vec<MapKey>,
    names: Vec<&'static str>,
    table: SharedTableRef,
    mutex: Mutex<HashMap<String, Message>>,
    rwlock: RwLock<HashMap<String, Message>>,
    /// The same map published as Skein publishes a version: readers `load` a guard, take no lock.
    arcswap: ArcSwap<HashMap<String, Message>>,
    /// One unshared map per thread: the control for what a second thread costs on this machine
    /// when nothing at all is shared.
    private: Vec<HashMap<String, Message>>,
}

fn fixture(domain: &ScriptDomain) -> Fixture {
    let (names, keys) = util::static_keys(KEYS);
    let table = domain.shared().table("hot").expect("table");
    let mut map = HashMap::new();
    for (i, (name, key)) in names.iter().zip(&keys).enumerate() {
        table
            .set(key.clone(), Message::Integer(i as i64))
            .expect("set");
        map.insert(name.to_string(), Message::Integer(i as i64));
    }
    table.set(COUNTER, Message::Integer(0)).expect("counter");
    map.insert(COUNTER.to_string(), Message::Integer(0));
    Fixture {
        keys,
        names,
        table,
        mutex: Mutex::new(map.clone()),
        private: vec![map.clone(), map.clone()],
        arcswap: ArcSwap::from_pointee(map.clone()),
        rwlock: RwLock::new(map),
    }
}

/// Runs `work(thread index)` on `threads` scoped threads released together; answers the wall
/// time from the release to the last one's end, and the CPU time the threads spent in `work`.
fn on_threads(threads: usize, work: impl Fn(usize) + Sync) -> (Duration, Duration) {
    let start = Barrier::new(threads + 1);
    thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (start, work) = (&start, &work);
                s.spawn(move || {
                    start.wait();
                    let cpu = util::thread_cpu();
                    work(t);
                    util::thread_cpu() - cpu
                })
            })
            .collect();
        start.wait();
        let t0 = Instant::now();
        let cpu = workers.into_iter().map(|w| w.join().unwrap()).sum();
        (t0.elapsed(), cpu)
    })
}

fn as_int(m: &Message) -> i64 {
    match m {
        Message::Integer(i) => *i,
        other => panic!("expected an integer, got {other:?}"),
    }
}

/// `OPS` calls of `get(key index)`, starting at key `t * 7` so the threads don't walk in step.
/// Generic, so each side's loop is compiled on its own with no choice of side inside it.
fn read_loop(t: usize, get: impl Fn(usize) -> Option<Message>) {
    let mut sum = 0i64;
    for i in 0..OPS {
        let k = (i + t * 7) % KEYS;
        sum += as_int(get(k).as_ref().expect("present"));
    }
    black_box(sum);
}

/// The read loop of one side, from thread `t`.
fn reads(f: &Fixture, side: &str, t: usize) {
    match side {
        "skein" => read_loop(t, |k| f.table.get(f.keys[k].clone()).expect("get")),
        "mutex" => read_loop(t, |k| f.mutex.lock().unwrap().get(f.names[k]).cloned()),
        "private" => read_loop(t, |k| f.private[t].get(f.names[k]).cloned()),
        "arcswap" => read_loop(t, |k| f.arcswap.load().get(f.names[k]).cloned()),
        _ => read_loop(t, |k| f.rwlock.read().unwrap().get(f.names[k]).cloned()),
    }
}

/// `OPS` calls of `set(key index, value)`, cycling through the keys.
fn write_loop(set: impl Fn(usize, Message)) {
    for i in 0..OPS {
        set(i % KEYS, Message::Integer(i as i64));
    }
}

/// `ATOMICS` calls of `inc()`.
fn atomic_loop(inc: impl Fn()) {
    for _ in 0..ATOMICS {
        inc();
    }
}

fn native(c: &mut Criterion) {
    let pool = Pool::new(1);
    let domain = ScriptDomain::new(&pool, DomainSpec::new("bench")).expect("domain");
    let f = fixture(&domain);

    let mut g = util::group(c, "shared_native_get", Throughput::Elements(OPS as u64));
    for (side, name, cpu_name) in [
        ("skein", "get/skein", "cpu:get/skein"),
        ("mutex", "get/mutex", "cpu:get/mutex"),
        ("rwlock", "get/rwlock", "cpu:get/rwlock"),
        ("arcswap", "get/arcswap", "cpu:get/arcswap"),
        ("private", "get/private", "cpu:get/private"),
    ] {
        g.bench_function(BenchmarkId::new(side, "1 thread"), |b| {
            b.iter_custom(|iters| {
                let (cpu, t0) = (util::thread_cpu(), Instant::now());
                for _ in 0..iters {
                    reads(&f, side, 0);
                }
                let took = t0.elapsed();
                util::keep(cpu_name, util::thread_cpu() - cpu, iters);
                util::keep(name, took, iters)
            })
        });
    }
    g.finish();

    let mut g = util::group(
        c,
        "shared_native_get_2",
        Throughput::Elements(2 * OPS as u64),
    );
    for (side, name, cpu_name) in [
        ("skein", "get2/skein", "cpu:get2/skein"),
        ("mutex", "get2/mutex", "cpu:get2/mutex"),
        ("rwlock", "get2/rwlock", "cpu:get2/rwlock"),
        ("arcswap", "get2/arcswap", "cpu:get2/arcswap"),
        ("private", "get2/private", "cpu:get2/private"),
    ] {
        g.bench_function(BenchmarkId::new(side, "2 threads"), |b| {
            b.iter_custom(|iters| {
                let (mut took, mut cpu) = (Duration::ZERO, Duration::ZERO);
                for _ in 0..iters {
                    let (wall, spent) = on_threads(2, |t| reads(&f, side, t));
                    took += wall;
                    cpu += spent;
                }
                util::keep(cpu_name, cpu, iters);
                util::keep(name, took, iters)
            })
        });
    }
    g.finish();

    let mut g = util::group(c, "shared_native_set", Throughput::Elements(OPS as u64));
    for (side, name) in [
        ("skein", "set/skein"),
        ("mutex", "set/mutex"),
        ("rwlock", "set/rwlock"),
    ] {
        g.bench_function(BenchmarkId::new(side, "1 thread"), |b| {
            b.iter_custom(|iters| {
                let t0 = Instant::now();
                for _ in 0..iters {
                    match side {
                        "skein" => {
                            write_loop(|k, v| f.table.set(f.keys[k].clone(), v).expect("set"))
                        }
                        "mutex" => write_loop(|k, v| {
                            *f.mutex.lock().unwrap().get_mut(f.names[k]).expect("key") = v
                        }),
                        _ => write_loop(|k, v| {
                            *f.rwlock.write().unwrap().get_mut(f.names[k]).expect("key") = v
                        }),
                    }
                }
                util::keep(name, t0.elapsed(), iters)
            })
        });
    }
    g.finish();

    let counter = MapKey::String(Bytes::from_static(COUNTER.as_bytes()));
    for (group, sides) in [
        (
            "shared_native_atomic",
            [
                (Increment::Atomic, "atomic2/skein", 2),
                (Increment::Mutex, "atomic2/mutex", 2),
                (Increment::Atomic, "atomic1/skein", 1),
                (Increment::Mutex, "atomic1/mutex", 1),
            ],
        ),
        (
            "shared_native_add",
            [
                (Increment::Add, "add2/skein", 2),
                (Increment::Mutex, "add2/mutex", 2),
                (Increment::Add, "add1/skein", 1),
                (Increment::Mutex, "add1/mutex", 1),
            ],
        ),
    ] {
        let mut g = util::group(c, group, Throughput::Elements(2 * ATOMICS as u64));
        for (side, name, threads) in sides {
            g.throughput(Throughput::Elements((threads * ATOMICS) as u64));
            let id = BenchmarkId::new(side.id(), format!("{threads} threads"));
            g.bench_function(id, |b| {
                b.iter_custom(|iters| {
                    let took = (0..iters)
                        .map(|_| increments(&f, &counter, side, threads))
                        .sum();
                    util::keep(name, took, iters)
                })
            });
        }
        g.finish();
    }
}

/// One way to add 1 to the counter.
#[derive(Clone, Copy, PartialEq)]
enum Increment {
    /// `SharedTableRef::atomic` with a closure that adds 1.
    Atomic,
    /// `SharedTableRef::add(key, 1)`: the numeric fast path, no closure.
    Add,
    /// The baseline: lock the `Mutex<HashMap>`, read, write back the sum.
    Mutex,
}

impl Increment {
    fn id(self) -> &'static str {
        match self {
            Increment::Atomic => "skein_atomic",
            Increment::Add => "skein_add",
            Increment::Mutex => "mutex",
        }
    }
}

/// `ATOMICS` increments of the counter from each of `threads` threads at once; answers the wall
/// time, and checks that no increment was lost.
fn increments(f: &Fixture, counter: &MapKey, side: Increment, threads: usize) -> Duration {
    let read = || match side {
        Increment::Mutex => as_int(&f.mutex.lock().unwrap()[COUNTER]),
        _ => as_int(&f.table.get(counter.clone()).unwrap().unwrap()),
    };
    let before = read();
    let (took, _) = on_threads(threads, |_| match side {
        Increment::Atomic => atomic_loop(|| {
            f.table
                .atomic(counter.clone(), |v| {
                    Some(Message::Integer(as_int(&v.expect("counter")) + 1))
                })
                .expect("atomic");
        }),
        Increment::Add => atomic_loop(|| {
            f.table
                .add(counter.clone(), Message::Integer(1))
                .expect("add");
        }),
        Increment::Mutex => atomic_loop(|| {
            let mut map = f.mutex.lock().unwrap();
            let v = map.get_mut(COUNTER).expect("counter");
            *v = Message::Integer(as_int(v) + 1);
        }),
    });
    assert_eq!(
        read() - before,
        (threads * ATOMICS) as i64,
        "{}: lost an update",
        side.id()
    );
    took
}

criterion_group!(benches, native);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    use util::{ratio, ratio_goal, Goal};
    println!("--- shared_native (ratios of medians, this run) ---");
    ratio(
        "get, 1 thread",
        "get/skein",
        OPS,
        "get/rwlock",
        OPS,
        "informative",
    );
    ratio(
        "get, 1 thread",
        "get/skein",
        OPS,
        "get/mutex",
        OPS,
        "informative",
    );
    ratio_goal(
        "get, 2 threads",
        "get2/skein",
        2 * OPS,
        "get2/rwlock",
        2 * OPS,
        Goal::at_least(2.0, "2x"),
    );
    ratio(
        "get, 2 threads",
        "get2/skein",
        2 * OPS,
        "get2/mutex",
        2 * OPS,
        "informative",
    );
    ratio(
        "get, 1 thread",
        "get/skein",
        OPS,
        "get/arcswap",
        OPS,
        "same publication model: what Skein's lookup and answer cost over a HashMap's",
    );
    ratio(
        "get, 2 threads",
        "get2/skein",
        2 * OPS,
        "get2/arcswap",
        2 * OPS,
        "same publication model, 2 threads",
    );
    ratio(
        "get, 2 threads",
        "get2/arcswap",
        2 * OPS,
        "get2/rwlock",
        2 * OPS,
        "the publication model alone against the lock",
    );
    ratio(
        "get scaling",
        "get2/skein",
        2 * OPS,
        "get/skein",
        OPS,
        "2 threads over 1; ideal 2.00x",
    );
    ratio(
        "get scaling",
        "get2/rwlock",
        2 * OPS,
        "get/rwlock",
        OPS,
        "2 threads over 1",
    );
    ratio(
        "get scaling",
        "get2/arcswap",
        2 * OPS,
        "get/arcswap",
        OPS,
        "2 threads over 1",
    );
    ratio(
        "get scaling",
        "get2/private",
        2 * OPS,
        "get/private",
        OPS,
        "2 threads over 1, nothing shared: what this machine allows now",
    );
    ratio_goal(
        "set of an existing key, 1 thread",
        "set/skein",
        OPS,
        "set/mutex",
        OPS,
        Goal::at_least(0.5, "0.5x"),
    );
    ratio(
        "set, 1 thread",
        "set/skein",
        OPS,
        "set/rwlock",
        OPS,
        "informative",
    );
    ratio_goal(
        "atomic, 2 threads",
        "atomic2/skein",
        2 * ATOMICS,
        "atomic2/mutex",
        2 * ATOMICS,
        Goal::at_least(1.0, "1.0x"),
    );
    ratio(
        "atomic, 1 thread",
        "atomic1/skein",
        ATOMICS,
        "atomic1/mutex",
        ATOMICS,
        "uncontended; informative",
    );
    ratio_goal(
        "add, 2 threads",
        "add2/skein",
        2 * ATOMICS,
        "add2/mutex",
        2 * ATOMICS,
        Goal::at_least(2.0, "2.0x"),
    );
    ratio(
        "add, 1 thread",
        "add1/skein",
        ATOMICS,
        "add1/mutex",
        ATOMICS,
        "uncontended; informative",
    );
    ratio(
        "add vs atomic, 2 threads",
        "add2/skein",
        2 * ATOMICS,
        "atomic2/skein",
        2 * ATOMICS,
        "what the numeric fast path saves over a closure; informative",
    );
    println!("CPU time per get (all threads' CPU over all gets; the same on 1 and 2 threads = no contention):");
    for side in ["skein", "arcswap", "rwlock", "mutex", "private"] {
        let per = |name: String, ops: usize| {
            util::median(&name).map_or(f64::NAN, |d| d.as_secs_f64() * 1e9 / ops as f64)
        };
        let one = per(format!("cpu:get/{side}"), OPS);
        let two = per(format!("cpu:get2/{side}"), 2 * OPS);
        println!(
            "  {side}: 1 thread {one:.1} ns, 2 threads {two:.1} ns ({:.2}x)",
            two / one
        );
    }
}
