//! Script domains: what a domain's own machinery costs, each against a baseline in the
//! same run.
//!
//! 1. **Domain create + start + stop**: `ScriptDomain::new`, a first `advance` (which moves it to
//!    `Running`), `stop`. Baseline: `mlua::Lua::new()` and its drop, the VM alone.
//! 2. **An empty `update` handler per frame over 100 contexts**: `run_phase(Update)` with 100
//!    contexts each bound to `function() end`. Baseline: the same 100 Luau functions called from
//!    Rust through mlua.
//! 3. **Worker message round trip vs dispatch round trip**: `Worker:send` + `Worker:receive` to an
//!    echo worker, against `jobs.dispatch(...):await()` of an echo entry, both timed in Luau.
//! 4. **Named-event throughput**: a script emits 4,096 named events with `events.emit` and the
//!    host drains them into one `events.on` handler, and the host posts 4,096 with
//!    `DomainMailbox::post_named` and drains them. Baselines: the same handler called 4,096
//!    times from a Luau loop (what the queue adds to a direct call), and a
//!    `crossbeam_channel` of `Message`s whose receiver calls the handler through mlua (a
//!    hand-rolled host queue).
//!
//! Hand-timed rounds after one warm-up round each; medians printed.

use std::time::{Duration, Instant};

use skein::capability::{CapabilityId, CapabilitySet, RootAuthority};
use skein::{mlua, ContextSpec, DomainSpec, Message, Phase, Plan, Pool, ScriptDomain};

const ROUNDS: usize = 7;
const CREATES: usize = 200;
const CONTEXTS: usize = 100;
const FRAMES: usize = 2_000;
const TRIPS: usize = 5_000;
/// One drain's worth: the default `EventLimits::per_drain`.
const EVENTS: usize = 4_096;
const BATCHES: usize = 20;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Runs `f` once to warm up, then `ROUNDS` times; answers the median per-op time.
fn rounds(ops: usize, mut f: impl FnMut() -> Duration) -> Duration {
    f();
    median((0..ROUNDS).map(|_| f() / ops as u32).collect())
}

fn ns(d: Duration) -> f64 {
    d.as_secs_f64() * 1e9
}

fn create_start_stop(pool: &Pool) -> (Duration, Duration) {
    let skein = rounds(CREATES, || {
        let t = Instant::now();
        for _ in 0..CREATES {
            let mut d = ScriptDomain::new(pool, DomainSpec::new("bench")).expect("domain");
            d.advance(Duration::from_millis(16)).expect("advance");
            d.stop();
        }
        t.elapsed()
    });
    let lua = rounds(CREATES, || {
        let t = Instant::now();
        for _ in 0..CREATES {
            drop(std::hint::black_box(mlua::Lua::new()));
        }
        t.elapsed()
    });
    (skein, lua)
}

fn empty_updates(pool: &Pool) -> (Duration, Duration) {
    let mut spec = DomainSpec::new("contexts");
    for i in 0..CONTEXTS {
        spec = spec
            .context(ContextSpec::new(format!("c{i}")).phases([Phase::Update]))
            .expect("context");
    }
    let domain = ScriptDomain::new(pool, spec).expect("domain");
    domain
        .exec(&format!(
            "local context = require('@skein/context') for i = 0, {} do context.bind(`c{{i}}`, {{ update = function() end }}) end",
            CONTEXTS - 1
        ))
        .expect("bind");
    let skein = rounds(FRAMES, || {
        let t = Instant::now();
        for _ in 0..FRAMES {
            let report = domain.run_phase(Phase::Update, &[]).expect("phase");
            assert_eq!(report.calls, CONTEXTS);
        }
        t.elapsed()
    });
    let lua = mlua::Lua::new();
    // Interpreted, as Skein runs a module without `--!native`: Skein builds mlua without
    // `luau-jit`, so this VM has no code generator.
    let functions: Vec<mlua::Function> = (0..CONTEXTS)
        .map(|_| lua.load("return function() end").eval().expect("fn"))
        .collect();
    let direct = rounds(FRAMES, || {
        let t = Instant::now();
        for _ in 0..FRAMES {
            for f in &functions {
                f.call::<()>(()).expect("call");
            }
        }
        t.elapsed()
    });
    (skein, direct)
}

fn round_trips(pool: &Pool) -> (Duration, Duration) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("echo.luau"),
        "return { echo = function(x) return x end }",
    )
    .expect("module");
    let grant = RootAuthority::new().grant(CapabilitySet::from_iter([CapabilityId::new(
        "worker.spawn",
    )
    .expect("name")]));
    let spec = DomainSpec::new("trips")
        .plan(Plan::new().root(dir.path()))
        .grant(grant);
    let domain = ScriptDomain::new(pool, spec).expect("domain");
    domain
        .exec("echo = require('@skein/worker').spawn { name = 'echo', source = 'return function(m) return m end' }")
        .expect("spawn");
    let seconds = |src: String| match domain.eval(&src).expect("trip") {
        Message::Number(s) => Duration::from_secs_f64(s),
        other => panic!("expected seconds, got {other:?}"),
    };
    let actor = rounds(TRIPS, || {
        seconds(format!(
            "local t = os.clock() for i = 1, {TRIPS} do echo:send(i) assert(echo:receive(10) == i) end return os.clock() - t"
        ))
    });
    let dispatch = rounds(TRIPS, || {
        seconds(format!(
            "local t = os.clock() for i = 1, {TRIPS} do assert(jobs.dispatch('./echo', 'echo', i):await() == i) end return os.clock() - t"
        ))
    });
    (actor, dispatch)
}

/// Per-event costs: (Luau emit + drain, Luau direct call, host post_named + drain, channel +
/// mlua call).
fn named_events(pool: &Pool) -> [Duration; 4] {
    let domain = ScriptDomain::new(pool, DomainSpec::new("events")).expect("domain");
    domain
        .exec(
            "events = require('@skein/events') total = 0 \
             function onTick(x) total += x end events.on('tick', onTick)",
        )
        .expect("bind");
    let drain_all = || {
        let report = domain.drain_events();
        assert_eq!(report.delivered, EVENTS, "{report:?}");
        assert_eq!(report.pending, 0);
    };
    let emitted = rounds(EVENTS * BATCHES, || {
        let t = Instant::now();
        for _ in 0..BATCHES {
            domain
                .exec(&format!(
                    "for i = 1, {EVENTS} do events.emit('tick', i) end"
                ))
                .expect("emit");
            drain_all();
        }
        t.elapsed()
    });
    let direct = rounds(EVENTS * BATCHES, || {
        let t = Instant::now();
        for _ in 0..BATCHES {
            domain
                .exec(&format!("for i = 1, {EVENTS} do onTick(i) end"))
                .expect("direct");
        }
        t.elapsed()
    });
    let mailbox = domain.mailbox();
    let posted = rounds(EVENTS * BATCHES, || {
        let t = Instant::now();
        for _ in 0..BATCHES {
            for i in 0..EVENTS {
                mailbox
                    .post_named("tick", Message::Integer(i as i64))
                    .expect("post");
            }
            drain_all();
        }
        t.elapsed()
    });
    let lua = mlua::Lua::new();
    // Interpreted, as Skein runs a module without `--!native`: Skein builds mlua without
    // `luau-jit`, so this VM has no code generator.
    let handler: mlua::Function = lua
        .load("local total = 0 return function(x) total += x end")
        .eval()
        .expect("handler");
    let (tx, rx) = crossbeam_channel::unbounded::<(String, Message)>();
    let channel = rounds(EVENTS * BATCHES, || {
        let t = Instant::now();
        for _ in 0..BATCHES {
            for i in 0..EVENTS {
                tx.send(("tick".to_owned(), Message::Integer(i as i64)))
                    .expect("send");
            }
            for (name, message) in rx.try_iter() {
                debug_assert_eq!(name, "tick");
                let value = message.to_lua(&lua).expect("value");
                handler.call::<()>(value).expect("call");
            }
        }
        t.elapsed()
    });
    [emitted, direct, posted, channel]
}

fn main() {
    let pool = Pool::new(2);
    let (create, lua) = create_start_stop(&pool);
    println!(
        "domain create + advance + stop: {:.1} µs; Lua::new + drop {:.1} µs; ratio {:.2}x",
        ns(create) / 1e3,
        ns(lua) / 1e3,
        ns(create) / ns(lua)
    );
    let (frame, direct) = empty_updates(&pool);
    println!(
        "empty update over {CONTEXTS} contexts: {:.1} µs per frame ({:.0} ns per handler); the same {CONTEXTS} functions called from Rust {:.1} µs; ratio {:.1}x",
        ns(frame) / 1e3,
        ns(frame) / CONTEXTS as f64,
        ns(direct) / 1e3,
        ns(frame) / ns(direct)
    );
    let (actor, dispatch) = round_trips(&pool);
    println!(
        "round trip: @skein/worker send+receive {:.2} µs; jobs.dispatch():await() {:.2} µs; ratio {:.2}x",
        ns(actor) / 1e3,
        ns(dispatch) / 1e3,
        ns(actor) / ns(dispatch)
    );
    let [emitted, direct, posted, channel] = named_events(&pool);
    println!(
        "named events: events.emit + drain {:.0} ns per event ({:.2} M/s); the handler called from a Luau loop {:.0} ns; ratio {:.1}x",
        ns(emitted),
        1e3 / ns(emitted),
        ns(direct),
        ns(emitted) / ns(direct)
    );
    println!(
        "named events: host post_named + drain {:.0} ns per event ({:.2} M/s); crossbeam channel + mlua call {:.0} ns; ratio {:.1}x",
        ns(posted),
        1e3 / ns(posted),
        ns(channel),
        ns(posted) / ns(channel)
    );
}
