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

mod util;

use std::time::Instant;

use skein::{Message, ScriptDomain};

const WORKERS: usize = 2;
/// Option tables (and keys) of the `empty` and `keyed` modes.
const KEYS: usize = 1_000;
/// The `map` mode: not options but one `jobs.map` over the N elements instead of N dispatches
/// (`util::echo_map`), so the counts are per element of a map.
const MAP: &str = "map";

/// Dispatches `n` echo items and awaits each, checking the sum so nothing is skipped.
#[inline(never)]
fn run(domain: &ScriptDomain, n: usize, options: Option<&str>) {
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

fn main() {
    let fixture = util::module_domain("cost", WORKERS, "echo.luau", util::ECHO);
    let domain = &fixture.domain;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n = args.first().and_then(|n| n.parse().ok()).unwrap_or(10_000);
    let options = match args.get(1).map(String::as_str) {
        None => None,
        Some("empty") => Some("{}"),
        Some("keyed") => Some(r#"{ key = "k" .. k }"#),
        Some("map") => Some(MAP),
        Some(other) => panic!("unknown options {other}: empty, keyed or map"),
    };
    // Warm the workers' VMs, the module caches and (keyed) every key's binding outside the
    // counted call.
    run(domain, KEYS, options);
    let t = Instant::now();
    run(domain, n, options);
    match options {
        Some(MAP) => println!("jobs.map over {n} elements: {:?}", t.elapsed()),
        _ => println!("dispatch + await x{n}: {:?}", t.elapsed()),
    }
}
