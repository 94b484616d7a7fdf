//! Loom models of the key lanes: items of one key run one at a time, in order, each exactly once,
//! whichever thread enqueues, settles, releases or supersedes.
//!
//! A thread handed an item (by `enqueue` or `settle`) plays the bound worker: it runs the item,
//! then settles it and runs whatever the settle hands over. That is the pool's contract with the
//! lanes: every item delivered to run is settled exactly once, after it ran. Releases are logged
//! inside the delivery callback, as the pool posts them, so the log shows the delivery order.
#![cfg(loom)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;
use loom_tests::Branches;
use skein::__loom::{Deliver, KeyLanes, Release};

const KEY: u8 = 7;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    Ran(u32),
    Released,
}

struct Harness {
    lanes: KeyLanes<u8, u32>,
    log: Mutex<Vec<Event>>,
    in_flight: AtomicUsize,
}

impl Harness {
    fn new() -> Arc<Harness> {
        Arc::new(Harness {
            lanes: KeyLanes::new(2),
            log: Mutex::new(Vec::new()),
            in_flight: AtomicUsize::new(0),
        })
    }

    /// Logs a release; answers an item to run.
    fn delivered(&self, d: Deliver<u32>) -> Option<u32> {
        match d {
            Deliver::Run { item, .. } => Some(item),
            Deliver::Released { .. } => {
                self.log.lock().unwrap().push(Event::Released);
                None
            }
        }
    }

    /// Runs what was handed over, settling each item, until the lane hands nothing more.
    fn drive(&self, mut next: Option<u32>) {
        while let Some(item) = next {
            assert_eq!(
                self.in_flight.fetch_add(1, Ordering::SeqCst),
                0,
                "two items of one key ran at once"
            );
            self.log.lock().unwrap().push(Event::Ran(item));
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            next = None;
            self.lanes.settle(&KEY, |d| {
                if let Some(item) = self.delivered(d) {
                    next = Some(item);
                }
            });
        }
    }

    /// Enqueues; answers what a supersede took and the item to run, if delivered now.
    fn enqueue_only(&self, item: u32, supersede: bool) -> (Vec<u32>, Option<u32>) {
        let mut run = None;
        let superseded = self
            .lanes
            .enqueue(&KEY, item, supersede, |d| run = self.delivered(d))
            .unwrap();
        (superseded, run)
    }

    fn enqueue(&self, item: u32, supersede: bool) -> Vec<u32> {
        let (superseded, run) = self.enqueue_only(item, supersede);
        self.drive(run);
        superseded
    }

    fn ran(&self) -> Vec<u32> {
        let log = self.log.lock().unwrap();
        log.iter()
            .filter_map(|e| match e {
                Event::Ran(i) => Some(*i),
                Event::Released => None,
            })
            .collect()
    }
}

#[test]
fn enqueue_while_running_hands_each_item_over_once_in_order() {
    loom::model(|| {
        let h = Harness::new();
        let other = {
            let h = h.clone();
            thread::spawn(move || {
                h.enqueue(10, false);
                h.enqueue(11, false);
            })
        };
        h.enqueue(1, false);
        other.join().unwrap();
        let ran = h.ran();
        let mut sorted = ran.clone();
        sorted.sort();
        assert_eq!(sorted, [1, 10, 11], "each item exactly once");
        let pos = |x| ran.iter().position(|&i| i == x).unwrap();
        assert!(pos(10) < pos(11), "dispatch order within a thread: {ran:?}");
        assert_eq!(h.lanes.keys_held().iter().sum::<usize>(), 1);
    });
}

#[test]
fn release_ends_the_binding_only_after_earlier_items_settle() {
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let h = Harness::new();
        // Item 1 is handed to a worker thread that runs and settles it concurrently.
        let first = h.enqueue_only(1, false).1;
        let worker = {
            let h = h.clone();
            thread::spawn(move || h.drive(first))
        };
        let answer = h.lanes.release(&KEY, |d| assert!(h.delivered(d).is_none()));
        assert_ne!(answer, Release::NotHeld, "the key was held");
        // Side 1: the release waited in the lane for item 1 to settle.
        BRANCHES.hit_if(answer == Release::Queued);
        worker.join().unwrap();
        // Dispatched after the release: binds anew and runs.
        h.enqueue(2, false);
        let log = h.log.lock().unwrap().clone();
        assert_eq!(log, [Event::Ran(1), Event::Released, Event::Ran(2)]);
        assert_eq!(h.lanes.keys_held().iter().sum::<usize>(), 1);
        assert_eq!(h.lanes.release(&KEY, |_| {}), Release::Now);
        assert_eq!(h.lanes.release(&KEY, |_| {}), Release::NotHeld);
    });
    BRANCHES.assert_both();
}

#[test]
fn supersede_racing_settle_takes_the_queued_item_or_lets_it_run_never_both() {
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let h = Harness::new();
        let first = h.enqueue_only(1, false).1;
        assert_eq!(h.enqueue_only(2, false), (vec![], None));
        let worker = {
            let h = h.clone();
            thread::spawn(move || h.drive(first))
        };
        let superseded = h.enqueue(3, true);
        worker.join().unwrap();
        let ran = h.ran();
        match superseded.as_slice() {
            [2] => assert_eq!(ran, [1, 3]),
            [] => assert_eq!(ran, [1, 2, 3]),
            other => panic!("superseded {other:?}"),
        }
        // Side 1: the supersede took item 2 before the settle delivered it.
        BRANCHES.hit(superseded.len());
    });
    BRANCHES.assert_both();
}

/// A release that ends the binding at once is delivered (under the lanes' lock) before an item
/// dispatched after it can run in the next binding: a worker never runs the new binding's item
/// while the old binding's state is still there.
#[test]
fn a_release_reaches_the_worker_before_the_next_binding_runs() {
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let h = Harness::new();
        // Bound, run and settled: the lane is idle.
        h.enqueue(1, false);
        let releaser = {
            let h = h.clone();
            thread::spawn(move || {
                let answer = h.lanes.release(&KEY, |d| assert!(h.delivered(d).is_none()));
                assert_ne!(answer, Release::NotHeld, "the key was held");
            })
        };
        h.enqueue(2, false);
        releaser.join().unwrap();
        let log = h.log.lock().unwrap().clone();
        // Still held at the end: item 2 bound the key anew after the release ended the binding.
        let rebound = h.lanes.keys_held().iter().sum::<usize>() == 1;
        if rebound {
            assert_eq!(
                log,
                [Event::Ran(1), Event::Released, Event::Ran(2)],
                "the next binding's item ran before the release reached the worker"
            );
        } else {
            assert_eq!(log, [Event::Ran(1), Event::Ran(2), Event::Released]);
        }
        BRANCHES.hit_if(rebound);
    });
    BRANCHES.assert_both();
}
