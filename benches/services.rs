//! Engine services: what a forwarded query and a recorded command cost, each against the same
//! service called on the engine thread in the same run.
//!
//! 1. **Forwarded query round trip.** A worker item calls `world.get(i)` (a query answering a
//!    number) `ROUND_TRIPS` times in a loop, timing each call with `os.clock()` for the
//!    percentiles and the loop as a whole for ns/call. Two engine-thread shapes: the host in
//!    `eval` (the engine thread sleeps on its mailbox between calls) and the host spinning
//!    `frame()`. Baseline: the same service called directly from the engine VM in a Luau loop.
//! 2. **Busy frame loop.** `LOOP_ITEMS` items on 2 workers each call the query `LOOP_CALLS`
//!    times while the engine thread runs `frame()` back to back; forwarded calls per second come
//!    from the `FrameReport` counts.
//! 3. **100,000 recorded commands applied in one frame.** `COMMAND_JOBS` items each record
//!    `COMMANDS / COMMAND_JOBS` `world.set(i, v)` commands; the frame that applies all of them is
//!    timed (asserted to have applied every one). Baselines: the same command closure called
//!    100,000 times from a Rust loop, and `world.set` called 100,000 times from the engine VM.
//!
//! 4. **Frames per query → commands → settle.** `SETTLE_JOBS` items, one at a time, each make
//!    one forwarded `world.get` and then record two `world.set` commands, while the host runs
//!    `frame()` every `SETTLE_PACE` (a host's frame loop, not a spin): how many frames pass from
//!    the frame that answered the query to the one its promise settled in (0: the same frame).
//!    Baseline: an item that records the same commands without the query, counted from the
//!    frame that first sees it done.
//!
//! Hand-timed rounds (medians printed), hdrhistogram for the per-call percentiles, as
//! `benches/latency.rs` does.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use skein::message::Args;
use skein::{DomainSpec, MapKey, Message, Plan, Pool, PromiseStatus, ScriptDomain, ServiceError};

const WORKERS: usize = 2;
/// Forwarded calls one item makes per round trip round.
const ROUND_TRIPS: usize = 20_000;
/// Direct calls the engine-VM baseline makes per round.
const DIRECT_CALLS: usize = 200_000;
/// Rounds of each round-trip side, alternating, after one warm-up round each.
const ROUNDS: usize = 5;
const LOOP_ITEMS: usize = 8;
const LOOP_CALLS: usize = 10_000;
const COMMANDS: usize = 100_000;
const COMMAND_JOBS: usize = 8;
const COMMAND_ROUNDS: usize = 15;
/// Items of the query → commands → settle count, one at a time.
const SETTLE_JOBS: usize = 200;
/// How long the host sleeps between two frames in that count.
const SETTLE_PACE: Duration = Duration::from_millis(1);
/// How long the host waits after the last job said it is done recording, so its completion
/// (posted just after the entry returns) is in the mailbox before the timed frame.
const SETTLE_MARGIN: Duration = Duration::from_millis(20);

const MODULE: &str = r#"
local M = {}
-- n forwarded calls, each timed: the samples, the whole loop, and a sum to check.
function M.query(n)
    local samples = table.create(n)
    local sum = 0
    local t0 = os.clock()
    for i = 1, n do
        local a = os.clock()
        sum += world.get(i)
        samples[i] = os.clock() - a
    end
    return { total = os.clock() - t0, sum = sum, samples = samples }
end
function M.queryLoop(n)
    local sum = 0
    for i = 1, n do sum += world.get(i) end
    return sum
end
-- Records world.set for ids first..last, then says so on the queue "recorded".
function M.record(a)
    for i = a.first, a.last do world.set(i, i * 2) end
    jobs.shared.queue("recorded"):push(a.first)
    return a.last - a.first + 1
end
-- One query, then two commands: the shape a job that reads the world and writes it back has.
function M.queryThenRecord(i)
    local v = world.get(i)
    world.set(i, v)
    world.set(i + 1, v)
    return v
end
-- The same commands, no query.
function M.recordOnly(i)
    world.set(i, 2 * i)
    world.set(i + 1, 2 * i)
    return 2 * i
end
return M
"#;

/// The id a service call names: its first argument.
fn id_of(args: &[Message]) -> Result<usize, String> {
    match args.first() {
        Some(Message::Number(n)) => Ok(*n as usize),
        Some(Message::Integer(i)) => Ok(*i as usize),
        other => Err(format!("expected an id, got {other:?}")),
    }
}

/// `world.get(i)`: answers `2 * i`.
fn get(args: Args) -> Result<Message, ServiceError> {
    Ok(Message::Number(2.0 * id_of(&args)? as f64))
}

/// `world.set(i, v)` over `world`: the closure the frame applies and the Rust baseline calls.
fn set_command(
    world: Rc<RefCell<Vec<f64>>>,
) -> impl FnMut(Args) -> Result<(), ServiceError> + 'static {
    move |args| {
        let v = match args.get(1) {
            Some(Message::Number(v)) => *v,
            other => return Err(format!("expected a value, got {other:?}").into()),
        };
        let id = id_of(&args)?;
        world.borrow_mut()[id] = v;
        Ok(())
    }
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 10_000_000_000, 3).expect("histogram")
}

fn field<'a>(m: &'a Message, name: &str) -> &'a Message {
    let Message::Map(entries) = m else {
        panic!("expected a table, got {m:?}")
    };
    entries
        .iter()
        .find(|(k, _)| matches!(k, MapKey::String(s) if &s[..] == name.as_bytes()))
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("no field {name}"))
}

fn number(m: &Message) -> f64 {
    match m {
        Message::Number(n) => *n,
        Message::Integer(i) => *i as f64,
        other => panic!("expected a number, got {other:?}"),
    }
}

fn map(pairs: &[(&str, Message)]) -> Message {
    Message::Map(
        pairs
            .iter()
            .map(|(k, v)| (MapKey::String(k.as_bytes().to_vec().into()), v.clone()))
            .collect(),
    )
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Sum of `world.get(i)` for i in 1..=n.
fn expected_sum(n: usize) -> f64 {
    (n * (n + 1)) as f64
}

/// One forwarded round-trip round's answer: ns per call over the loop, samples recorded.
fn read_round(answer: &Message, h: &mut Histogram<u64>) -> f64 {
    assert_eq!(number(field(answer, "sum")), expected_sum(ROUND_TRIPS));
    let Message::List(samples) = field(answer, "samples") else {
        panic!("samples are a list")
    };
    assert_eq!(samples.len(), ROUND_TRIPS);
    for s in samples {
        h.record((number(s) * 1e9).round().max(1.0) as u64)
            .expect("record");
    }
    number(field(answer, "total")) * 1e9 / ROUND_TRIPS as f64
}

/// Dispatches from Rust and runs frames back to back until every promise settled. Answers the
/// wall time, the frames run and the forwarded calls they counted.
fn spin_frames(
    domain: &ScriptDomain,
    items: &[(&str, Message)],
) -> (Duration, u64, u64, Vec<Message>) {
    let start = Instant::now();
    let promises: Vec<_> = items
        .iter()
        .map(|(entry, args)| {
            domain
                .dispatch("./svc", entry, args.clone())
                .expect("dispatch")
        })
        .collect();
    let (mut frames, mut forwarded) = (0, 0);
    while promises
        .iter()
        .any(|p| p.status() == PromiseStatus::Pending)
    {
        let report = domain.frame(Duration::ZERO);
        frames += 1;
        forwarded += report.forwarded_calls;
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "frame loop stuck"
        );
    }
    let took = start.elapsed();
    let answers = promises
        .into_iter()
        .map(|p| p.wait().expect("item"))
        .collect();
    (took, frames, forwarded, answers)
}

fn us(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1000.0
}

fn show(name: &str, h: &Histogram<u64>) {
    println!(
        "  {name:<34} n={:>7}  p50 {:>7.2} us  p99 {:>7.2} us  p99.9 {:>8.2} us",
        h.len(),
        us(h, 0.50),
        us(h, 0.99),
        us(h, 0.999),
    );
}

fn round_trips(domain: &ScriptDomain) {
    let forwarded_src = format!(r#"return jobs.dispatch("./svc", "query", {ROUND_TRIPS}):await()"#);
    let direct_src = format!(
        r#"
        local s = 0
        local t0 = os.clock()
        for i = 1, {DIRECT_CALLS} do s += world.get(i) end
        return {{ total = os.clock() - t0, sum = s }}
        "#
    );
    let (mut eval_h, mut spin_h) = (histogram(), histogram());
    let (mut eval_ns, mut spin_ns, mut direct_ns) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..=ROUNDS {
        // Forwarded, the host in eval: the engine thread sleeps on its mailbox between calls.
        let answer = domain.eval(&forwarded_src).expect("forwarded eval");
        let mut h = histogram();
        let ns = read_round(&answer, &mut h);
        // Forwarded, the host spinning frames.
        let (_, _, _, answers) =
            spin_frames(domain, &[("query", Message::Number(ROUND_TRIPS as f64))]);
        let mut hs = histogram();
        let spin = read_round(&answers[0], &mut hs);
        // Direct, from the engine VM.
        let answer = domain.eval(&direct_src).expect("direct eval");
        assert_eq!(number(field(&answer, "sum")), expected_sum(DIRECT_CALLS));
        let direct = number(field(&answer, "total")) * 1e9 / DIRECT_CALLS as f64;
        if round == 0 {
            continue; // warm-up
        }
        eval_h.add(&h).expect("merge");
        spin_h.add(&hs).expect("merge");
        eval_ns.push(ns);
        spin_ns.push(spin);
        direct_ns.push(direct);
    }
    let (e, s, d) = (median(eval_ns), median(spin_ns), median(direct_ns));
    println!("--- forwarded query round trip ({ROUNDS} rounds, medians) ---");
    println!("  forwarded, host in eval:           {e:>9.1} ns/call");
    println!("  forwarded, host spinning frame():  {s:>9.1} ns/call");
    println!("  direct from the engine VM:         {d:>9.1} ns/call");
    println!(
        "  ratio forwarded/direct: eval {:.0}x, spinning {:.0}x",
        e / d,
        s / d
    );
    show("forwarded per call, host in eval", &eval_h);
    show("forwarded per call, spinning frames", &spin_h);
}

fn busy_frame_loop(domain: &ScriptDomain) {
    let items: Vec<(&str, Message)> = (0..LOOP_ITEMS)
        .map(|_| ("queryLoop", Message::Number(LOOP_CALLS as f64)))
        .collect();
    spin_frames(domain, &items); // warm-up
    let mut rates = Vec::new();
    let mut per_frame = Vec::new();
    for _ in 0..ROUNDS {
        let (took, frames, forwarded, answers) = spin_frames(domain, &items);
        assert_eq!(forwarded, (LOOP_ITEMS * LOOP_CALLS) as u64);
        for a in &answers {
            assert_eq!(number(a), expected_sum(LOOP_CALLS));
        }
        rates.push(forwarded as f64 / took.as_secs_f64());
        per_frame.push(forwarded as f64 / frames as f64);
    }
    println!(
        "--- busy frame loop: {LOOP_ITEMS} items x {LOOP_CALLS} queries on {WORKERS} workers ---"
    );
    println!(
        "  forwarded calls served: median {:.0} calls/s (rounds: {}); {:.2} calls per frame",
        median(rates.clone()),
        rates
            .iter()
            .map(|r| format!("{:.0}", r))
            .collect::<Vec<_>>()
            .join(", "),
        median(per_frame)
    );
}

fn recorded_commands(domain: &ScriptDomain, world: &Rc<RefCell<Vec<f64>>>) {
    let per_job = COMMANDS / COMMAND_JOBS;
    let recorded = domain.shared().queue("recorded", 64).expect("queue");
    let items: Vec<Message> = (0..COMMAND_JOBS)
        .map(|j| {
            let first = j * per_job + 1;
            map(&[
                ("first", Message::Number(first as f64)),
                ("last", Message::Number((first + per_job - 1) as f64)),
            ])
        })
        .collect();
    let mut frame_ns = Vec::new();
    for round in 0..=COMMAND_ROUNDS {
        world.borrow_mut().fill(0.0);
        let promises: Vec<_> = items
            .iter()
            .map(|a| {
                domain
                    .dispatch("./svc", "record", a.clone())
                    .expect("dispatch")
            })
            .collect();
        for _ in 0..COMMAND_JOBS {
            let said = recorded.pop_blocking(Duration::from_secs(60)).expect("pop");
            assert!(said.is_some(), "a job never finished recording");
        }
        std::thread::sleep(SETTLE_MARGIN);
        let t0 = Instant::now();
        let report = domain.frame(Duration::ZERO);
        let took = t0.elapsed();
        assert_eq!(
            report.commands_applied, COMMANDS as u64,
            "the timed frame must apply every command (raise SETTLE_MARGIN on a loaded machine)"
        );
        for p in promises {
            assert_eq!(number(&p.wait().expect("job")), per_job as f64);
        }
        assert!(world.borrow()[1..=COMMANDS]
            .iter()
            .enumerate()
            .all(|(i, v)| *v == 2.0 * (i + 1) as f64));
        if round > 0 {
            frame_ns.push(took.as_nanos() as f64 / COMMANDS as f64);
        }
    }

    // Baseline 1: the same closure called from a Rust loop, its arguments built beforehand.
    let mut rust_ns = Vec::new();
    let mut set = set_command(world.clone());
    for _ in 0..=COMMAND_ROUNDS {
        let calls: Vec<Args> = (1..=COMMANDS)
            .map(|i| {
                Args(vec![
                    Message::Number(i as f64),
                    Message::Number(2.0 * i as f64),
                ])
            })
            .collect();
        let t0 = Instant::now();
        for args in calls {
            set(args).expect("set");
        }
        rust_ns.push(t0.elapsed().as_nanos() as f64 / COMMANDS as f64);
    }
    rust_ns.remove(0);

    // Baseline 2: world.set called from the engine VM, which runs the closure directly.
    let luau_src = format!(
        r#"
        local t0 = os.clock()
        for i = 1, {COMMANDS} do world.set(i, i * 2) end
        return os.clock() - t0
        "#
    );
    let mut luau_ns = Vec::new();
    for _ in 0..=COMMAND_ROUNDS {
        let took = number(&domain.eval(&luau_src).expect("eval"));
        luau_ns.push(took * 1e9 / COMMANDS as f64);
    }
    luau_ns.remove(0);

    let (f, r, l) = (median(frame_ns.clone()), median(rust_ns), median(luau_ns));
    println!(
        "--- {COMMANDS} commands recorded by {COMMAND_JOBS} jobs, applied in one frame ({COMMAND_ROUNDS} rounds, medians) ---"
    );
    println!(
        "  the frame that applies them:        {f:>7.1} ns/command ({:.2} ms per frame; fastest {:.1} ns)",
        f * COMMANDS as f64 / 1e6,
        frame_ns.iter().copied().fold(f64::INFINITY, f64::min)
    );
    println!("  the closure from a Rust loop:       {r:>7.1} ns/call");
    println!("  world.set from the engine VM:       {l:>7.1} ns/call");
    println!(
        "  ratio frame/Rust loop {:.1}x, frame/engine VM {:.2}x",
        f / r,
        f / l
    );
}

/// Runs `entry(i)` for i in 1..=SETTLE_JOBS, one item at a time, under a paced frame loop;
/// answers, per item, the frames from the first frame that saw its work (its query answered,
/// or for an item without a query the frame that applied its commands) to the frame its
/// promise settled in, and the frames from dispatch to settle.
fn frames_to_settle(domain: &ScriptDomain, entry: &str) -> (Vec<u64>, Vec<u64>) {
    let (mut after, mut total) = (Vec::new(), Vec::new());
    for i in 1..=SETTLE_JOBS {
        let promise = domain
            .dispatch("./svc", entry, Message::Number(i as f64))
            .expect("dispatch");
        let start = Instant::now();
        let (mut frames, mut first_seen) = (0u64, None);
        while promise.status() == PromiseStatus::Pending {
            std::thread::sleep(SETTLE_PACE);
            let report = domain.frame(SETTLE_PACE);
            frames += 1;
            if first_seen.is_none() && (report.forwarded_calls > 0 || report.commands_applied > 0) {
                first_seen = Some(frames);
            }
            assert!(start.elapsed() < Duration::from_secs(60), "never settled");
        }
        assert_eq!(number(&promise.wait().expect("item")), 2.0 * i as f64);
        after.push(frames - first_seen.unwrap_or(frames));
        total.push(frames);
    }
    (after, total)
}

fn settle_frames(domain: &ScriptDomain) {
    let summary = |v: &[u64]| {
        let mut s = v.to_vec();
        s.sort_unstable();
        let at_most_one = s.iter().filter(|f| **f <= 1).count();
        format!(
            "median {}, max {}, {}/{} within one frame",
            s[s.len() / 2],
            s[s.len() - 1],
            at_most_one,
            s.len()
        )
    };
    frames_to_settle(domain, "queryThenRecord"); // warm-up
    let (after, total) = frames_to_settle(domain, "queryThenRecord");
    let (base_after, base_total) = frames_to_settle(domain, "recordOnly");
    println!(
        "--- query -> 2 commands -> settle, {SETTLE_JOBS} items one at a time, a frame every {} ms ---",
        SETTLE_PACE.as_millis()
    );
    println!("  frames after the answering frame:   {}", summary(&after));
    println!("  frames from dispatch to settle:     {}", summary(&total));
    println!(
        "  baseline, commands only, after the applying frame: {}",
        summary(&base_after)
    );
    println!(
        "  baseline, commands only, dispatch to settle:       {}",
        summary(&base_total)
    );
}

fn main() {
    // Criterion-style flags (`--bench`) are passed by cargo; nothing here reads them.
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("svc.luau"), MODULE).expect("write module");
    let pool = Pool::new(WORKERS);
    let plan = Plan::new().root(dir.path().canonicalize().expect("canonical tempdir"));
    let domain = ScriptDomain::new(&pool, DomainSpec::new("bench").plan(plan)).expect("domain");
    let world = Rc::new(RefCell::new(vec![0.0; COMMANDS + 1]));
    domain.register_query("world.get", get).expect("query");
    domain
        .register_command("world.set", set_command(world.clone()))
        .expect("command");

    round_trips(&domain);
    busy_frame_loop(&domain);
    recorded_commands(&domain, &world);
    settle_frames(&domain);
    assert!(domain.take_reports().is_empty());
}
