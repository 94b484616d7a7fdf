//! A driver for counting instructions (not a timed benchmark): dispatches N items of an entry
//! that answers its argument from one Luau loop on the engine VM, then awaits each, on 2 workers,
//! so `valgrind --tool=callgrind` can count what one dispatch + await costs. Run it at two counts
//! and divide the difference, so set-up cancels out:
//!
//! ```text
//! valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file=cg.2000.%p \
//!     target/release/deps/dispatch_cost-* 2000
//! valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file=cg.12000.%p \
//!     target/release/deps/dispatch_cost-* 12000
//! ```
//!
//! `--separate-threads=yes` writes one file per thread: `-01` is the engine thread (issue,
//! settle, resume), the next two are the workers (item run, reply). Subtract each thread's
//! `totals:` between the two runs and divide by 10,000; the domain, the pool and the VMs are
//! built in both runs, so they cancel out. `cargo bench --bench dispatch_cost` runs once with
//! 10,000 items and prints the wall time, as a smoke test.
//!
//! A second argument passes an options table on every dispatch, as `benches/keyed.rs` does:
//! `empty` passes `{}`, `keyed` passes `{ key = "k" .. (i % 1000) }` (1,000 tables made before
//! the loop, so the two differ only in the key). Their difference is what the key machinery
//! costs per item, free of the machine's load. `map` runs one `jobs.map` over a list of N
//! elements instead (`util::echo_map`, list made in Luau and results summed as the loop does),
//! so the counts are per element of a map.
//!
//! `rust` issues the same items from Rust instead, as `benches/dispatch.rs`'s "issued from Rust"
//! side does: `ScriptDomain::dispatch` N times, then `Promise::wait` on each in order. The engine
//! thread's count is then the host API's cost per item (no Luau loop, no `PromiseHandle`), and
//! the workers' count is the same per-item work with a host slot to settle.

mod util;

use std::time::Instant;

use skein::{Message, ScriptDomain};

/// How the items are issued.
#[derive(Clone, Copy)]
enum Mode {
    /// From one Luau loop, with `Some` options table on every dispatch.
    Luau(Option<&'static str>),
    /// From Rust: `ScriptDomain::dispatch` and `Promise::wait`.
    Rust,
}

const WORKERS: usize = 2;
/// Option tables (and keys) of the `empty` and `keyed` modes.
const KEYS: usize = 1_000;
/// The `map` mode: not options but one `jobs.map` over the N elements instead of N dispatches
/// (`util::echo_map`), so the counts are per element of a map.
const MAP: &str = "map";

/// Dispatches `n` echo items and awaits each, checking the sum so nothing is skipped.
#[inline(never)]
fn run(domain: &ScriptDomain, n: usize, mode: Mode) {
    let options = match mode {
        Mode::Luau(options) => options,
        Mode::Rust => return run_from_rust(domain, n),
    };
    let source = match options {
        None => util::echo_loop(n),
        Some(MAP) => util::echo_map(n),
        Some(option) => util::echo_loop_with_options(n, KEYS, option),
    };
    let sum = domain.eval(&source).expect("eval");
    let expected = (n as i64) * (n as i64 + 1) / 2;
    // A Luau number sum comes back a number, as nested values always did.
    assert!(
        matches!(sum, Message::Number(s) if s == expected as f64),
        "{sum:?}"
    );
}

/// `n` echo items dispatched from Rust, then each awaited in order, checking the sum.
#[inline(never)]
fn run_from_rust(domain: &ScriptDomain, n: usize) {
    let promises: Vec<_> = (1..=n as i64)
        .map(|i| {
            domain
                .dispatch("./echo", "run", Message::Integer(i))
                .expect("dispatch")
        })
        .collect();
    let sum: i64 = promises
        .into_iter()
        .map(|p| match p.wait().expect("wait") {
            Message::Integer(i) => i,
            Message::Number(x) => x as i64,
            other => panic!("expected an integer, got {other:?}"),
        })
        .sum();
    assert_eq!(sum, (n as i64) * (n as i64 + 1) / 2);
}

fn main() {
    let fixture = util::module_domain("cost", WORKERS, "echo.luau", util::ECHO);
    let domain = &fixture.domain;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n = args.first().and_then(|n| n.parse().ok()).unwrap_or(10_000);
    let mode = match args.get(1).map(String::as_str) {
        None => Mode::Luau(None),
        Some("empty") => Mode::Luau(Some("{}")),
        Some("keyed") => Mode::Luau(Some(r#"{ key = "k" .. k }"#)),
        Some("map") => Mode::Luau(Some(MAP)),
        Some("rust") => Mode::Rust,
        Some(other) => panic!("unknown mode {other}: empty, keyed, map or rust"),
    };
    // Warm the workers' VMs, the module caches and (keyed) every key's binding outside the
    // counted call.
    run(domain, KEYS, mode);
    let t = Instant::now();
    run(domain, n, mode);
    match mode {
        Mode::Luau(Some(MAP)) => println!("jobs.map over {n} elements: {:?}", t.elapsed()),
        _ => println!("dispatch + await x{n}: {:?}", t.elapsed()),
    }
}
