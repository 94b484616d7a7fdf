//! Loom models of the per-run budget: a thread's runs, the watchdog and cancellers share one
//! `Signal`. Time is a parameter here (loom has no clock): the tests pick `now` for each party.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use skein::__loom::{CancelToken, Interruption, Signal};
use std::sync::atomic::Ordering;
use std::time::Duration;

const BUDGET: u64 = 100;

/// A watchdog tick for an ended run must not stop the next run, whose deadline is ahead.
#[test]
fn a_stale_deadline_never_stops_the_next_run() {
    loom::model(|| {
        let signal = Arc::new(Signal::new());
        // Run 1: deadline 100, passed at now = 150 from the watchdog's point of view.
        let outer = signal.begin_run(100, BUDGET, None);
        let dog = {
            let signal = signal.clone();
            thread::spawn(move || {
                signal.tick(150);
            })
        };
        signal.end_run(outer);
        // Run 2 starts at 150 with deadline 250: checked at 160 it must go on.
        let outer = signal.begin_run(250, BUDGET, None);
        let stopped = signal.check(160, None);
        dog.join().unwrap();
        assert_eq!(stopped, None, "run 2 was stopped by run 1's deadline");
        // And whatever the interleaving, a check now still does not stop run 2.
        assert_eq!(signal.check(160, None), None);
        signal.end_run(outer);
    });
}

/// A deadline that really passed is never lost: the run is stopped by a check after the tick.
#[test]
fn a_passed_deadline_stops_the_run() {
    loom::model(|| {
        let signal = Arc::new(Signal::new());
        let outer = signal.begin_run(100, BUDGET, None);
        let dog = {
            let signal = signal.clone();
            thread::spawn(move || {
                signal.tick(150);
            })
        };
        // The running thread checks (as the interrupt would) at 150, concurrently with the tick.
        let during = signal.check(150, None);
        dog.join().unwrap();
        let after = if during.is_none() {
            // A check racing the tick may clear nothing or see nothing; the next tick raises again.
            signal.tick(160);
            signal.check(160, None)
        } else {
            during
        };
        assert_eq!(
            after,
            Some(Interruption::Deadline(Duration::from_nanos(BUDGET)))
        );
        signal.end_run(outer);
    });
}

/// A cancel is never lost: not when another job's run on the same thread clears the bit (its own
/// token is not set), and not when it lands while the cancelled job runs. And a cancel never
/// stops a run whose own token is not set.
#[test]
fn a_cancel_reaches_its_run_and_only_its_run() {
    loom::model(|| {
        let signal = Arc::new(Signal::new());
        let token = Arc::new(CancelToken::new(false));
        let other = CancelToken::new(false);
        let canceller = {
            let (signal, token) = (signal.clone(), token.clone());
            thread::spawn(move || {
                token.store(true, Ordering::Release);
                signal.request_cancel();
            })
        };
        // Another job's run on the thread: its interrupt must not stop it.
        let outer = signal.begin_run(1_000, BUDGET, Some(&other));
        assert_eq!(signal.check(10, Some(&other)), None);
        signal.end_run(outer);
        // The cancelled job's run: stopped by a check once the canceller is done.
        let outer = signal.begin_run(1_000, BUDGET, Some(&token));
        let during = signal.check(20, Some(&token));
        canceller.join().unwrap();
        let after = during.or_else(|| signal.check(20, Some(&token)));
        assert_eq!(after, Some(Interruption::Cancelled), "the cancel was lost");
        signal.end_run(outer);
    });
}
