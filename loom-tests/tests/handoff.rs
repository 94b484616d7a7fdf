//! Loom models of the item hand-off: a worker starting an item races its canceller.
#![cfg(loom)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use loom_tests::Branches;
use skein::__loom::{CancelOutcome, Handoff, HandoffState};

/// What happened to one item, counted by both parties.
#[derive(Default)]
struct Ledger {
    body_runs: AtomicUsize,
    settled: AtomicUsize,
}

/// The worker's side: start, run (checking for a cancel request midway), finish, settle.
fn worker(handoff: &Handoff, ledger: &Ledger) {
    if !handoff.try_start() {
        return; // Cancelled while queued: the canceller settled it.
    }
    ledger.body_runs.fetch_add(1, Ordering::SeqCst);
    let _interrupted = handoff.cancel_requested();
    handoff.finish();
    ledger.settled.fetch_add(1, Ordering::SeqCst);
}

#[test]
fn cancel_racing_start_runs_at_most_once_and_settles_once() {
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let handoff = Arc::new(Handoff::new());
        let ledger = Arc::new(Ledger::default());
        let worker_thread = {
            let (handoff, ledger) = (handoff.clone(), ledger.clone());
            thread::spawn(move || worker(&handoff, &ledger))
        };
        let outcome = handoff.cancel();
        if outcome == CancelOutcome::Unstarted {
            ledger.settled.fetch_add(1, Ordering::SeqCst);
        }
        worker_thread.join().unwrap();

        assert_eq!(
            ledger.settled.load(Ordering::SeqCst),
            1,
            "exactly one party settles"
        );
        let runs = ledger.body_runs.load(Ordering::SeqCst);
        match outcome {
            CancelOutcome::Unstarted => {
                assert_eq!(runs, 0, "Unstarted means the body never runs");
                assert_eq!(handoff.state(), HandoffState::Cancelled);
            }
            CancelOutcome::Running | CancelOutcome::Finished => {
                assert_eq!(runs, 1);
                assert_eq!(handoff.state(), HandoffState::Done);
            }
        }
        // Side 1: the cancel won the queued item before the worker could start it.
        BRANCHES.hit_if(outcome == CancelOutcome::Unstarted);
    });
    BRANCHES.assert_both();
}

#[test]
fn two_cancellers_and_a_worker_settle_once() {
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let handoff = Arc::new(Handoff::new());
        let ledger = Arc::new(Ledger::default());
        let worker_thread = {
            let (handoff, ledger) = (handoff.clone(), ledger.clone());
            thread::spawn(move || worker(&handoff, &ledger))
        };
        let canceller = {
            let (handoff, ledger) = (handoff.clone(), ledger.clone());
            thread::spawn(move || {
                if handoff.cancel() == CancelOutcome::Unstarted {
                    ledger.settled.fetch_add(1, Ordering::SeqCst);
                }
            })
        };
        if handoff.cancel() == CancelOutcome::Unstarted {
            ledger.settled.fetch_add(1, Ordering::SeqCst);
        }
        worker_thread.join().unwrap();
        canceller.join().unwrap();
        assert_eq!(ledger.settled.load(Ordering::SeqCst), 1);
        let runs = ledger.body_runs.load(Ordering::SeqCst);
        assert!(runs <= 1);
        // Side 1: the worker started the body before either canceller.
        BRANCHES.hit(runs);
    });
    BRANCHES.assert_both();
}

#[test]
fn a_cancel_during_the_run_is_reported_by_finish() {
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let handoff = Arc::new(Handoff::new());
        assert!(handoff.try_start());
        let canceller = {
            let handoff = handoff.clone();
            thread::spawn(move || handoff.cancel())
        };
        let requested = handoff.finish();
        let outcome = canceller.join().unwrap();
        // Either the cancel landed while running (finish saw it) or after (nothing to do).
        match outcome {
            CancelOutcome::Running => assert!(requested),
            CancelOutcome::Finished => assert!(!requested),
            CancelOutcome::Unstarted => panic!("the item had started"),
        }
        // Side 1: the cancel landed while the body ran.
        BRANCHES.hit_if(outcome == CancelOutcome::Running);
    });
    BRANCHES.assert_both();
}
