//! Loom models of the executor's sleep/wake protocol, run on the real `Executor` with its worker
//! threads spawned by loom. A lost wake-up leaves a worker parked with work queued and the main
//! thread parked waiting for it: loom reports that as a deadlock.
#![cfg(loom)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use loom_tests::Branches;
use skein::__loom::{Executor, Poll, WorkerContext, WorkerLogic};

/// Messages are closures; items are closures or a request to push one onto the local deque.
/// Nothing is ever pending between polls.
#[derive(Default)]
struct Closures {
    /// When set, the worker's sleep count as it takes each item or message, in order.
    sleeps_seen: Option<SleepsSeen>,
}

/// Outside the model (a `std` mutex, never held across a loom operation): what the test reads
/// after `shutdown` to tell which side of the race an interleaving took.
type SleepsSeen = std::sync::Arc<std::sync::Mutex<Vec<u64>>>;

impl Closures {
    /// A logic that records its worker's sleep count in `seen` before each item or message.
    fn recording(seen: &SleepsSeen) -> impl Fn(usize) -> Closures + Send + Sync + 'static {
        let seen = seen.clone();
        move |_| Closures {
            sleeps_seen: Some(seen.clone()),
        }
    }

    fn note(&self, cx: &WorkerContext<'_, Self>) {
        if let Some(seen) = &self.sleeps_seen {
            let sleeps = cx.executor().stats()[cx.index()].sleeps;
            seen.lock().unwrap().push(sleeps);
        }
    }
}

/// Side 1: the worker parked between the first thing it took and the second, so the second's
/// producer had to wake it; side 0: it took the second without parking (still in its loop, or
/// on its re-check after announcing sleep).
fn parked_between(seen: &SleepsSeen) -> bool {
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2, "two things taken: {seen:?}");
    seen[1] > seen[0]
}

type Job = Box<dyn FnOnce() + Send>;

enum Item {
    Run(Job),
    /// Runs the first job here and pushes the second onto this worker's own deque.
    RunAndPushLocal(Job, Job),
}

impl WorkerLogic for Closures {
    type Item = Item;
    type Message = Job;

    fn run_item(&mut self, item: Item, cx: &WorkerContext<'_, Self>) {
        self.note(cx);
        match item {
            Item::Run(job) => job(),
            Item::RunAndPushLocal(job, next) => {
                job();
                cx.push_local(Item::Run(next));
            }
        }
    }

    fn on_message(&mut self, msg: Job, cx: &WorkerContext<'_, Self>) {
        self.note(cx);
        msg();
    }

    fn poll(&mut self, _cx: &WorkerContext<'_, Self>) -> Poll {
        Poll::Idle { wake_at: None }
    }

    fn on_panic(&mut self, payload: Box<dyn std::any::Any + Send>, _cx: &WorkerContext<'_, Self>) {
        std::panic::resume_unwind(payload);
    }
}

/// A job that counts itself and wakes the waiting main thread.
fn counting_job(runs: &Arc<AtomicUsize>) -> Job {
    let runs = runs.clone();
    let main = thread::current();
    Box::new(move || {
        runs.fetch_add(1, Ordering::SeqCst);
        main.unpark();
    })
}

/// Parks the main thread until `runs` reaches `n`.
fn wait_for(runs: &AtomicUsize, n: usize) {
    while runs.load(Ordering::SeqCst) < n {
        thread::park();
    }
}

/// The first item wakes the main thread, which injects the second while the worker, idle
/// again, is on its way to sleep: the race under test.
#[test]
fn inject_vs_worker_going_to_sleep_is_never_lost() {
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let seen = SleepsSeen::default();
        let executor = Executor::start(1, Closures::recording(&seen));
        let runs = Arc::new(AtomicUsize::new(0));
        executor.inject(Item::Run(counting_job(&runs)));
        wait_for(&runs, 1);
        executor.inject(Item::Run(counting_job(&runs)));
        wait_for(&runs, 2);
        executor.shutdown();
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        BRANCHES.hit_if(parked_between(&seen));
    });
    BRANCHES.assert_both();
}

/// As above, with messages posted to the worker's inbox.
#[test]
fn post_to_a_sleeping_worker_is_never_lost() {
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let seen = SleepsSeen::default();
        let executor = Executor::start(1, Closures::recording(&seen));
        let runs = Arc::new(AtomicUsize::new(0));
        executor.post(0, counting_job(&runs));
        wait_for(&runs, 1);
        executor.post(0, counting_job(&runs));
        wait_for(&runs, 2);
        executor.shutdown();
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        assert_eq!(executor.stats()[0].items_run, 0, "a message is not an item");
        BRANCHES.hit_if(parked_between(&seen));
    });
    BRANCHES.assert_both();
}

#[test]
fn two_workers_one_item_runs_exactly_once() {
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let executor = Executor::start(2, |_| Closures::default());
        let runs = Arc::new(AtomicUsize::new(0));
        executor.inject(Item::Run(counting_job(&runs)));
        wait_for(&runs, 1);
        executor.shutdown();
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        let stats = executor.stats();
        assert_eq!(stats[0].items_run + stats[1].items_run, 1);
        // Side 1: the second worker took the item.
        BRANCHES.hit_if(stats[1].items_run == 1);
    });
    BRANCHES.assert_both();
}

#[test]
fn push_local_item_runs_exactly_once_here_or_stolen() {
    // A worker is the producer: its item pushes a second item onto its own deque, and the sibling
    // may be going to sleep meanwhile. Whoever takes the second item, it runs exactly once.
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let executor = Executor::start(2, |_| Closures::default());
        let runs = Arc::new(AtomicUsize::new(0));
        executor.inject(Item::RunAndPushLocal(
            counting_job(&runs),
            counting_job(&runs),
        ));
        wait_for(&runs, 2);
        executor.shutdown();
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        let stats = executor.stats();
        assert_eq!(stats[0].items_run + stats[1].items_run, 2);
        // Side 1: the sibling stole the second item.
        BRANCHES.hit_if(stats[0].steals + stats[1].steals > 0);
    });
    BRANCHES.assert_both();
}

#[test]
fn shutdown_wakes_workers_on_their_way_to_sleep() {
    // No work at all: shutdown races two workers announcing sleep. The join in `shutdown` only
    // returns if both saw the flag or were unparked.
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let executor = Executor::start(2, |_| Closures::default());
        executor.shutdown();
        assert!(executor.is_shut_down());
        let stats = executor.stats();
        assert_eq!(stats[0].items_run + stats[1].items_run, 0);
        // Side 1: a worker had parked, and the shutdown had to wake it.
        BRANCHES.hit_if(stats[0].sleeps + stats[1].sleeps > 0);
    });
    BRANCHES.assert_both();
}
