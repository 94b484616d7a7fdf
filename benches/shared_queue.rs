//! Shared queues: `ITEMS` integer messages through one bounded queue (capacity 1,024), with
//! 1 producer / 1 consumer and 2 producers / 2 consumers on native threads, through
//! `SharedQueueRef` (consumers in `pop_blocking`, or spinning on `try_pop`) and through
//! crossbeam's `ArrayQueue<Message>` of the same capacity, spinning, as the baseline. Then from
//! Luau: the engine script pushes, one worker job pops with `q:pop()` (or `q:popMany`); and
//! worker to worker, one job pushing and another popping. Both are set against the same
//! traffic through `ArrayQueue` natively. Goal: Luau `pop`, engine to worker, >= 1/4
//! of `ArrayQueue` 1/1; its line says whether this run met it. Both run alone under the filter
//! `-- '1x1/crossbeam|luau/pop/'`.
//!
//! A producer that finds the queue full yields and retries (the refused value comes back). Each
//! producer ends with one stop marker and each consumer stops at the first it pops, so every
//! item is consumed without a shared counter. Ratios of the medians are printed at the end.
//!
//! With the arguments `count fill N`, `count pop N` or `count push N` it is instead a driver for counting
//! instructions, not a benchmark: the host pushes N integers into a queue of 65,536 slots, and
//! with `pop` the engine VM then pops them in a Luau loop (`s += q:pop()`, each value ready: the
//! fast path). Run each under callgrind at two counts; `pop` minus `fill`, differenced and divided,
//! is what one Luau pop costs, its loop's bytecode included. With `count push N` the engine VM
//! pushes N integers in a Luau loop (`q:push(i)`, a slot always free); differenced and divided,
//! that is one Luau push with its loop:
//!
//! ```text
//! for mode in fill pop push; do for n in 10000 20000; do
//!     valgrind --tool=callgrind --separate-threads=yes \
//!         --callgrind-out-file=cg.$mode.$n.%p target/release/deps/shared_queue-* count $mode $n
//! done; done
//! grep totals: cg.*-01   # ((pop 20000 - pop 10000) - (fill 20000 - fill 10000)) / 10000
//! ```

mod util;

use std::hint::black_box;
use std::thread;
use std::time::{Duration, Instant};

use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use crossbeam_queue::ArrayQueue;
use skein::shared::{PopError, PushErrorKind, SharedQueueRef};
use skein::{DomainSpec, Message, Plan, Pool, ScriptDomain};

/// Items per iteration, split between the producers.
const ITEMS: usize = 100_000;
const CAPACITY: usize = 1_024;
const STOP: Message = Message::Boolean(false);
/// How long a blocked pop waits before it looks again (never reached while items flow).
const PATIENCE: Duration = Duration::from_secs(5);

/// One way of moving messages: push (retrying while full) and pop (waiting while empty).
trait Line: Sync {
    fn push(&self, m: Message);
    fn pop(&self) -> Message;
}

impl Line for ArrayQueue<Message> {
    fn push(&self, mut m: Message) {
        while let Err(back) = ArrayQueue::push(self, m) {
            m = back;
            thread::yield_now();
        }
    }
    fn pop(&self) -> Message {
        loop {
            if let Some(m) = ArrayQueue::pop(self) {
                return m;
            }
            thread::yield_now();
        }
    }
}

/// `SharedQueueRef` with consumers parked in `pop_blocking`.
struct Blocking(SharedQueueRef);
/// `SharedQueueRef` with consumers spinning on `try_pop`.
struct Spinning(SharedQueueRef);

fn push_shared(q: &SharedQueueRef, mut m: Message) {
    loop {
        match q.push(m) {
            Ok(()) => return,
            Err(e) if e.kind == PushErrorKind::Full => {
                m = e.into_inner();
                thread::yield_now();
            }
            Err(e) => panic!("push: {e}"),
        }
    }
}

impl Line for Blocking {
    fn push(&self, m: Message) {
        push_shared(&self.0, m)
    }
    fn pop(&self) -> Message {
        loop {
            match self.0.pop_blocking(PATIENCE) {
                Ok(Some(m)) => return m,
                Ok(None) => continue,
                Err(e) => panic!("pop_blocking: {e:?}"),
            }
        }
    }
}

impl Line for Spinning {
    fn push(&self, m: Message) {
        push_shared(&self.0, m)
    }
    fn pop(&self) -> Message {
        loop {
            match self.0.try_pop() {
                Ok(Some(m)) => return m,
                Ok(None) => thread::yield_now(),
                Err(PopError::Closed) => panic!("closed"),
                Err(e) => panic!("try_pop: {e:?}"),
            }
        }
    }
}

/// Moves `ITEMS` through `line` with `pairs` producers and `pairs` consumers; answers the wall
/// time and checks the sum of what was consumed.
fn traffic(line: &dyn Line, pairs: usize) -> Duration {
    let each = ITEMS / pairs;
    let t0 = Instant::now();
    let sum: i64 = thread::scope(|s| {
        for p in 0..pairs {
            s.spawn(move || {
                for i in 0..each {
                    line.push(Message::Integer((p * each + i) as i64));
                }
                line.push(STOP);
            });
        }
        let consumers: Vec<_> = (0..pairs)
            .map(|_| {
                s.spawn(move || {
                    let mut sum = 0i64;
                    loop {
                        match line.pop() {
                            Message::Integer(i) => sum += i,
                            _ => return sum,
                        }
                    }
                })
            })
            .collect();
        consumers.into_iter().map(|c| c.join().unwrap()).sum()
    });
    let took = t0.elapsed();
    let n = (pairs * each) as i64;
    assert_eq!(sum, n * (n - 1) / 2, "an item was lost or doubled");
    took
}

const DRAIN: &str = r#"
local M = {}

function M.pop(a)
    local q, n = jobs.shared.queue(a.name), a.n
    local sum = 0
    for _ = 1, n do
        sum += q:pop()
    end
    return sum
end

function M.popMany(a)
    local q, n = jobs.shared.queue(a.name), a.n
    local sum, got = 0, 0
    while got < n do
        local batch = q:popMany(256)
        for i = 1, #batch do
            sum += batch[i]
        end
        got += #batch
    end
    return sum
end

-- The producer of the worker-to-worker sides: on a full queue it yields its task
-- (`task.wait()`, the next step) so a consumer on the same worker can run.
function M.produce(a)
    local q, n = jobs.shared.queue(a.name), a.n
    local push = q.push
    local full = 0
    local t0 = os.clock()
    for i = 0, n - 1 do
        if not pcall(push, q, i) then
            repeat
                full += 1
                task.wait()
            until pcall(push, q, i)
        end
    end
    return { os.clock() - t0, full }
end

return M
"#;

/// The engine script: start a worker draining `n` items with `entry`, push `0..n-1` (trying again
/// while the queue is full), await the sum.
fn engine_pushes(entry: &str, n: usize) -> String {
    format!(
        r#"
        local q = jobs.shared.queue("lq", {{ capacity = {CAPACITY} }})
        local total = jobs.dispatch("./drain", "{entry}", {{ name = "lq", n = {n} }})
        local push = q.push
        local full = 0
        local t0 = os.clock()
        for i = 0, {n} - 1 do
            if not pcall(push, q, i) then
                repeat full += 1 until pcall(push, q, i)
            end
        end
        local pushing = os.clock() - t0
        local sum = total:await()
        local all = os.clock() - t0
        return {{ sum, pushing, all, full }}
        "#
    )
}

/// The engine script of the worker-to-worker sides: one job drains `n` items with `entry`,
/// another pushes them (yielding while the queue is full); answers as `engine_pushes` does,
/// with the producer's own pushing time.
fn worker_pushes(entry: &str, n: usize) -> String {
    format!(
        r#"
        local q = jobs.shared.queue("wq", {{ capacity = {CAPACITY} }})
        local t0 = os.clock()
        local total = jobs.dispatch("./drain", "{entry}", {{ name = "wq", n = {n} }})
        local made = jobs.dispatch("./drain", "produce", {{ name = "wq", n = {n} }}):await()
        local sum = total:await()
        return {{ sum, made[1], os.clock() - t0, made[2] }}
        "#
    )
}

fn number(m: &Message) -> f64 {
    match m {
        Message::Number(n) => *n,
        Message::Integer(i) => *i as f64,
        other => panic!("expected a number, got {other:?}"),
    }
}

fn queues(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("drain.luau"), DRAIN).expect("write module");
    let pool = Pool::new(2);
    let plan = Plan::new().root(dir.path().canonicalize().expect("canonical tempdir"));
    let domain = ScriptDomain::new(&pool, DomainSpec::new("bench").plan(plan)).expect("domain");
    let shared = domain.shared().queue("native", CAPACITY).expect("queue");
    let array = ArrayQueue::<Message>::new(CAPACITY);
    let blocking = Blocking(shared.clone());
    let spinning = Spinning(shared);

    for pairs in [1, 2] {
        let mut g = util::group(
            c,
            &format!("shared_queue_{pairs}x{pairs}"),
            Throughput::Elements(ITEMS as u64),
        );
        let sides: [(&str, &dyn Line); 3] = [
            ("skein_pop_blocking", &blocking),
            ("skein_try_pop_spin", &spinning),
            ("crossbeam_array_queue", &array),
        ];
        for (side, line) in sides {
            let name: &'static str = Box::leak(format!("{pairs}x{pairs}/{side}").into_boxed_str());
            g.bench_function(BenchmarkId::new(side, ITEMS), |b| {
                b.iter_custom(|iters| {
                    let mut took = Duration::ZERO;
                    for _ in 0..iters {
                        took += traffic(line, pairs);
                    }
                    util::keep(name, took, iters)
                })
            });
        }
        g.finish();
    }

    let expected = (ITEMS as i64) * (ITEMS as i64 - 1) / 2;
    domain.eval(&engine_pushes("pop", 10)).expect("warm");
    let sides = [
        ("luau/pop", engine_pushes("pop", ITEMS)),
        ("luau/popMany", engine_pushes("popMany", ITEMS)),
        ("luau/w2w_pop", worker_pushes("pop", ITEMS)),
        ("luau/w2w_popMany", worker_pushes("popMany", ITEMS)),
    ];
    let mut g = util::group(c, "shared_queue_luau", Throughput::Elements(ITEMS as u64));
    for (name, source) in &sides {
        let name: &'static str = name;
        g.bench_function(BenchmarkId::new(name, ITEMS), |b| {
            b.iter_custom(|iters| {
                let t0 = Instant::now();
                for _ in 0..iters {
                    let out = domain.eval(source).expect("eval");
                    let Message::List(parts) = black_box(out) else {
                        panic!("expected a list")
                    };
                    assert_eq!(number(&parts[0]), expected as f64, "lost or doubled");
                }
                util::keep(name, t0.elapsed(), iters)
            })
        });
    }
    g.finish();

    // Diagnostic, outside criterion: where one run of each Luau side spends its time.
    for (name, source) in &sides {
        let out = domain.eval(source).expect("eval");
        let Message::List(parts) = out else {
            panic!("expected a list")
        };
        println!(
            "{name} one run: pushing {:.1} ms, whole run {:.1} ms, {} pushes refused as full and retried",
            number(&parts[1]) * 1e3,
            number(&parts[2]) * 1e3,
            number(&parts[3])
        );
    }
}

criterion_group!(benches, queues);

/// `count fill N` / `count pop N` / `count push N`: see the module's docs.
fn count(mode: &str, n: usize) {
    let pool = Pool::new(1);
    let domain = ScriptDomain::new(&pool, DomainSpec::new("count")).expect("domain");
    let queue = domain.shared().queue("cost", 65_536).expect("queue");
    if mode == "push" {
        domain
            .eval(&format!(
                r#"local q = jobs.shared.queue("cost")
                for i = 1, {n} do q:push(i) end"#
            ))
            .expect("pushes");
        assert_eq!(queue.len(), n);
        return;
    }
    for i in 0..n {
        queue.push(Message::Number(i as f64)).expect("push");
    }
    if mode == "pop" {
        let sum = domain
            .eval(&format!(
                r#"local q, s = jobs.shared.queue("cost"), 0
                for _ = 1, {n} do s += q:pop() end
                return s"#
            ))
            .expect("pops");
        assert_eq!(number(&sum), (n * (n - 1) / 2) as f64);
    }
    black_box(queue.len());
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let [_, count_mode, mode, n, ..] = &args[..] {
        if count_mode == "count" {
            count(mode, n.parse().expect("N"));
            return;
        }
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
    use util::{ratio, ratio_goal, Goal};
    println!("--- shared_queue (ratios of medians, this run; items/s) ---");
    for p in ["1x1", "2x2"] {
        let name = |side: &str| format!("{p}/{side}");
        let base = name("crossbeam_array_queue");
        ratio(
            p,
            &name("skein_pop_blocking"),
            ITEMS,
            &base,
            ITEMS,
            "vs ArrayQueue",
        );
        ratio(
            p,
            &name("skein_try_pop_spin"),
            ITEMS,
            &base,
            ITEMS,
            "vs ArrayQueue",
        );
    }
    ratio_goal(
        "luau engine->worker, vs native ArrayQueue 1x1",
        "luau/pop",
        ITEMS,
        "1x1/crossbeam_array_queue",
        ITEMS,
        Goal::at_least(0.25, "1/4"),
    );
    ratio(
        "luau engine->worker",
        "luau/popMany",
        ITEMS,
        "1x1/crossbeam_array_queue",
        ITEMS,
        "vs native ArrayQueue 1x1",
    );
    ratio(
        "luau engine->worker",
        "luau/pop",
        ITEMS,
        "1x1/skein_pop_blocking",
        ITEMS,
        "vs native SharedQueueRef 1x1",
    );
    for side in ["luau/w2w_pop", "luau/w2w_popMany"] {
        ratio(
            "luau worker->worker",
            side,
            ITEMS,
            "1x1/crossbeam_array_queue",
            ITEMS,
            "vs native ArrayQueue 1x1",
        );
    }
}
