//! Loom models of the executor's sleep/wake protocol, run on the real `Executor` with its worker
//! threads spawned by loom. A lost wake-up leaves a worker parked with work queued and the main
//! thread parked waiting for it: loom reports that as a deadlock.
#![cfg(loom)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use skein::__loom::{Executor, Poll, WorkerContext, WorkerLogic};

/// Messages are closures; items are closures or a request to push one onto the local deque.
/// Nothing is ever pending between polls.
struct Closures;

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
        match item {
            Item::Run(job) => job(),
            Item::RunAndPushLocal(job, next) => {
                job();
                cx.push_local(Item::Run(next));
            }
        }
    }

    fn on_message(&mut self, msg: Job, _cx: &WorkerContext<'_, Self>) {
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

#[test]
fn inject_vs_worker_going_to_sleep_is_never_lost() {
    loom::model(|| {
        let executor = Executor::start(1, |_| Closures);
        let runs = Arc::new(AtomicUsize::new(0));
        executor.inject(Item::Run(counting_job(&runs)));
        wait_for(&runs, 1);
        executor.shutdown();
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    });
}

#[test]
fn post_to_a_sleeping_worker_is_never_lost() {
    loom::model(|| {
        let executor = Executor::start(1, |_| Closures);
        let runs = Arc::new(AtomicUsize::new(0));
        executor.post(0, counting_job(&runs));
        wait_for(&runs, 1);
        executor.shutdown();
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert_eq!(executor.stats()[0].items_run, 0, "a message is not an item");
    });
}

#[test]
fn two_workers_one_item_runs_exactly_once() {
    loom::model(|| {
        let executor = Executor::start(2, |_| Closures);
        let runs = Arc::new(AtomicUsize::new(0));
        executor.inject(Item::Run(counting_job(&runs)));
        wait_for(&runs, 1);
        executor.shutdown();
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        let stats = executor.stats();
        assert_eq!(stats[0].items_run + stats[1].items_run, 1);
    });
}

#[test]
fn push_local_item_runs_exactly_once_here_or_stolen() {
    // A worker is the producer: its item pushes a second item onto its own deque, and the sibling
    // may be going to sleep meanwhile. Whoever takes the second item, it runs exactly once.
    loom::model(|| {
        let executor = Executor::start(2, |_| Closures);
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
    });
}

#[test]
fn shutdown_wakes_workers_on_their_way_to_sleep() {
    // No work at all: shutdown races two workers announcing sleep. The join in `shutdown` only
    // returns if both saw the flag or were unparked.
    loom::model(|| {
        let executor = Executor::start(2, |_| Closures);
        executor.shutdown();
        assert!(executor.is_shut_down());
        let stats = executor.stats();
        assert_eq!(stats[0].items_run + stats[1].items_run, 0);
    });
}
