//! A driver for the memory an outstanding dispatch holds (not a timed benchmark): N dispatches
//! of an echo entry issued from one Luau loop that keeps every promise in a table, then awaits
//! them all, on 2 workers; it prints the process's peak resident set (`VmHWM` of
//! `/proc/self/status`) afterwards. Run at two counts, the difference over the difference in N is
//! what one dispatch held at the peak: its promise cell, its Luau handle, its job, its queued item
//! and its reply, with the engine VM's table slot for the promise.
//!
//! `rayon` runs the hand-rolled baseline instead, in the same way: N closures spawned on a
//! 2-thread rayon pool, each sending its answer on its own crossbeam channel of one, every
//! receiver held until all were spawned, then each received.
//!
//! `benches/promise_memory.sh` runs both at N = 1,000 and 101,000 and prints the bytes per
//! outstanding item of each and their ratio.

mod util;

use std::sync::Arc;

use skein::Message;

const WORKERS: usize = 2;

/// The process's peak resident set, in bytes.
fn peak_rss() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM in /proc/self/status");
    let kib: usize = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("VmHWM in kB");
    kib * 1024
}

/// `n` echo items dispatched from Luau with every promise held, then each awaited.
fn skein(n: usize) {
    let fixture = util::module_domain("memory", WORKERS, "echo.luau", util::ECHO);
    // Warm the workers' VMs and the module caches, so both counts start from the same VMs.
    fixture.domain.eval(&util::echo_loop(100)).expect("warm-up");
    let sum = fixture.domain.eval(&util::echo_loop(n)).expect("eval");
    let expected = (n as f64) * (n as f64 + 1.0) / 2.0;
    assert!(
        matches!(sum, Message::Number(s) if s == expected),
        "{sum:?}"
    );
}

/// The hand-rolled pool: `n` closures on rayon, each answering on its own channel, every
/// receiver held until all were spawned.
fn rayon_pool(n: usize) {
    let pool = Arc::new(
        rayon::ThreadPoolBuilder::new()
            .num_threads(WORKERS)
            .build()
            .expect("rayon pool"),
    );
    let receivers: Vec<_> = (1..=n as i64)
        .map(|i| {
            let (tx, rx) = crossbeam_channel::bounded(1);
            pool.spawn(move || {
                let _ = tx.send(Message::Integer(i));
            });
            rx
        })
        .collect();
    let sum: i64 = receivers
        .into_iter()
        .map(|rx| match rx.recv().expect("answer") {
            Message::Integer(i) => i,
            other => panic!("expected an integer, got {other:?}"),
        })
        .sum();
    assert_eq!(sum, (n as i64) * (n as i64 + 1) / 2);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n = args.first().and_then(|n| n.parse().ok()).unwrap_or(1_000);
    match args.get(1).map(String::as_str) {
        None => skein(n),
        Some("rayon") => rayon_pool(n),
        Some(other) => panic!("unknown mode {other}: rayon or none"),
    }
    println!("peak {} bytes after {n} items", peak_rss());
}
