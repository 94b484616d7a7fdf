//! A driver for counting instructions (not a timed benchmark): runs one of the domain's hot
//! paths a given number of times, so `valgrind --tool=callgrind` can count what one call costs.
//! Run it twice with different counts and divide the difference, so set-up cancels out:
//!
//! ```text
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/deps/call_cost-* update 200
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/deps/call_cost-* update 1200
//! ```
//!
//! Modes: `update N` runs an empty `update` handler in each of 100 contexts N times; `emit N`
//! and `post N` queue N batches of 512 named events (from Luau with `events.emit`, from the host
//! with `post_named`) and drain each into one `events.on` handler. `cargo bench --bench
//! call_cost` runs each mode once with a small count and prints wall time, as a smoke test.

use std::time::Instant;

use skein::{ContextSpec, DomainSpec, Message, Phase, Pool, ScriptDomain};

const CONTEXTS: usize = 100;
const EVENTS: usize = 512;

fn update(pool: &Pool, frames: usize) {
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
    for _ in 0..frames {
        let report = domain.run_phase(Phase::Update, &[]).expect("phase");
        assert_eq!(report.calls, CONTEXTS);
    }
}

fn events(pool: &Pool, batches: usize, from_luau: bool) {
    let domain = ScriptDomain::new(pool, DomainSpec::new("events")).expect("domain");
    domain
        .exec(
            "events = require('@skein/events') total = 0 \
             function onTick(x) total += x end events.on('tick', onTick)",
        )
        .expect("bind");
    let emit = format!("for i = 1, {EVENTS} do events.emit('tick', i) end");
    let mailbox = domain.mailbox();
    for _ in 0..batches {
        if from_luau {
            domain.exec(&emit).expect("emit");
        } else {
            for i in 0..EVENTS {
                mailbox
                    .post_named("tick", Message::Integer(i as i64))
                    .expect("post");
            }
        }
        let report = domain.drain_events();
        assert_eq!(report.delivered, EVENTS, "{report:?}");
    }
}

fn run(pool: &Pool, mode: &str, n: usize) {
    match mode {
        "update" => update(pool, n),
        "emit" => events(pool, n, true),
        "post" => events(pool, n, false),
        other => panic!("unknown mode {other}: update, emit or post"),
    }
}

fn main() {
    let pool = Pool::new(1);
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [mode, n] => run(&pool, mode, n.parse().expect("a count")),
        _ => {
            for mode in ["update", "emit", "post"] {
                let t = Instant::now();
                run(&pool, mode, 20);
                println!("{mode} x20: {:?}", t.elapsed());
            }
        }
    }
}
