//! Putting idle workers to sleep and waking them without ever losing a wake-up.
//!
//! Each worker has a state word, [`AWAKE`] or [`SLEEPING`], and the executor keeps a count of the
//! workers that have announced they are going to sleep. A worker that found nothing to do calls
//! [`Sleep::sleep`]; a thread that has just made work available calls [`Sleep::notify_one`] (work
//! any worker may take) or [`Sleep::notify_worker`] (a message for one worker). `README.md` in
//! this folder walks through the protocol; the short version is below.
//!
//! # Memory ordering
//!
//! The sleeper does: store `SLEEPING` and bump the sleeper count, `fence(SeqCst)`, then re-check
//! every source it may take from. The producer does: push, `fence(SeqCst)`, then read the sleeper
//! count and the state words. All `SeqCst` fences sit in one total order, so one of the two fences
//! comes first:
//!
//! - the sleeper's fence first: the producer's reads come after both fences, so they see the
//!   sleeper's `SLEEPING` store and the producer wakes it;
//! - the producer's fence first: the sleeper's re-check comes after both fences, so it sees the
//!   push and the sleeper does not park.
//!
//! Either way the item is not left alone with every worker parked. The transition back to
//! [`AWAKE`] is a compare-and-swap, so exactly one party (a producer, or the sleeper itself after
//! its re-check or a timeout) takes that worker out of the count and, for a producer, unparks it.
//! Park/unpark tokens make an unpark that lands before the park harmless: the park returns at
//! once. A token left over from a race shows up later as a spurious wake-up, which costs one empty
//! round of the worker loop.

use std::time::Instant;

use crossbeam_utils::CachePadded;

use crate::sync::{fence, park_until, thread, AtomicU8, AtomicUsize, Mutex, Ordering};

/// The worker is running its loop (or about to): nobody needs to wake it.
pub const AWAKE: u8 = 0;
/// The worker has announced it will park; the first party to move it back to [`AWAKE`] wakes it.
pub const SLEEPING: u8 = 1;

/// The sleep/wake state shared by the workers of one executor.
pub struct Sleep {
    states: Box<[CachePadded<AtomicU8>]>,
    /// How many workers are between announcing sleep and being taken back out of the count. It
    /// only spares producers a scan of the state words when nobody sleeps.
    sleepers: CachePadded<AtomicUsize>,
    /// Each worker's thread handle, set by the worker before it first announces sleep. A producer
    /// reads it only after winning the `SLEEPING -> AWAKE` swap, so it is always there by then.
    threads: Box<[Mutex<Option<thread::Thread>>]>,
}

/// What a call to [`Sleep::sleep`] ended up doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SleepOutcome {
    /// The re-check after announcing sleep found work; the worker never parked.
    WorkFound,
    /// The worker parked and has been woken (by a producer, its deadline, or spuriously).
    Parked,
}

impl Sleep {
    /// State for `workers` workers, all awake.
    pub fn new(workers: usize) -> Self {
        Self {
            states: (0..workers)
                .map(|_| CachePadded::new(AtomicU8::new(AWAKE)))
                .collect(),
            sleepers: CachePadded::new(AtomicUsize::new(0)),
            threads: (0..workers).map(|_| Mutex::new(None)).collect(),
        }
    }

    /// Records the calling thread as `worker`'s thread. Call it on that thread before it sleeps.
    pub fn register(&self, worker: usize) {
        *self.threads[worker]
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(thread::current());
    }

    /// Whether the calling thread is one of the registered workers.
    pub fn current_worker(&self) -> Option<usize> {
        let me = thread::current().id();
        self.threads.iter().position(|slot| {
            slot.lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
                .map(|t| t.id())
                == Some(me)
        })
    }

    /// How many workers are asleep or about to be.
    pub fn sleepers(&self) -> usize {
        self.sleepers.load(Ordering::Relaxed)
    }

    /// The state word of `worker` ([`AWAKE`] or [`SLEEPING`]), for tests and diagnostics.
    pub fn state(&self, worker: usize) -> u8 {
        self.states[worker].load(Ordering::Relaxed)
    }

    /// Parks `worker` (the calling thread) until a producer wakes it or `deadline` passes, unless
    /// `has_work` finds something after the sleep has been announced.
    ///
    /// `has_work` must look at every source the worker may take from (its inbox, its own deque,
    /// the injector, its siblings' deques) and at the shutdown flag. `on_park` runs just before
    /// the thread parks (the worker counts its sleeps there).
    pub fn sleep(
        &self,
        worker: usize,
        deadline: Option<Instant>,
        has_work: impl FnOnce() -> bool,
        on_park: impl FnOnce(),
    ) -> SleepOutcome {
        self.states[worker].store(SLEEPING, Ordering::SeqCst);
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        // Pairs with the fence in `notify_*`: see the module's `# Memory ordering`.
        fence(Ordering::SeqCst);
        // The mutant parks without this re-check (loom-tests/README.md).
        #[cfg(not(loom_mutant = "sleep_no_recheck"))]
        if has_work() {
            self.wake_self(worker);
            return SleepOutcome::WorkFound;
        }
        on_park();
        park_until(deadline);
        // A producer may have taken us out already; if not (deadline, spurious wake-up), we do.
        self.wake_self(worker);
        SleepOutcome::Parked
    }

    /// Wakes one sleeping worker, if any, after work every worker may take was pushed. The scan
    /// starts at `start` so that a worker pushing to its own deque prefers a sibling.
    pub fn notify_one(&self, start: usize) {
        // Pairs with the fence in `sleep`: see the module's `# Memory ordering`. The mutant
        // leaves it out (loom-tests/README.md).
        #[cfg(not(loom_mutant = "sleep_no_producer_fence"))]
        fence(Ordering::SeqCst);
        if self.sleepers.load(Ordering::Relaxed) == 0 {
            return;
        }
        let n = self.states.len();
        for k in 0..n {
            if self.try_wake((start + k) % n) {
                return;
            }
        }
    }

    /// Wakes `worker` if it sleeps, after a message was posted to its inbox.
    pub fn notify_worker(&self, worker: usize) {
        // Pairs with the fence in `sleep`: see the module's `# Memory ordering`.
        fence(Ordering::SeqCst);
        self.try_wake(worker);
    }

    /// Wakes every sleeping worker, after the shutdown flag was raised.
    pub fn notify_all(&self) {
        fence(Ordering::SeqCst);
        for worker in 0..self.states.len() {
            self.try_wake(worker);
        }
    }

    /// Takes `worker` out of `SLEEPING` and unparks it; false if it was not sleeping.
    fn try_wake(&self, worker: usize) -> bool {
        if self.states[worker].load(Ordering::Relaxed) != SLEEPING {
            return false;
        }
        if self.states[worker]
            .compare_exchange(SLEEPING, AWAKE, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        self.sleepers.fetch_sub(1, Ordering::Relaxed);
        if let Some(thread) = self.threads[worker]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            thread.unpark();
        }
        true
    }

    /// The sleeper's own way back to `AWAKE` when nobody woke it.
    fn wake_self(&self, worker: usize) {
        if self.states[worker]
            .compare_exchange(SLEEPING, AWAKE, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            self.sleepers.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::executor::wait_until;
    use std::time::Duration;

    #[test]
    fn found_work_on_the_recheck_means_no_park_and_a_clean_count() {
        let sleep = Sleep::new(1);
        sleep.register(0);
        let mut parked = false;
        let outcome = sleep.sleep(0, None, || true, || parked = true);
        assert_eq!(outcome, SleepOutcome::WorkFound);
        assert!(!parked);
        assert_eq!(sleep.state(0), AWAKE);
        assert_eq!(sleep.sleepers(), 0);
    }

    #[test]
    fn a_deadline_ends_the_sleep_and_the_sleeper_takes_itself_out() {
        let sleep = Sleep::new(1);
        sleep.register(0);
        let start = Instant::now();
        let at = start + Duration::from_millis(30);
        let outcome = sleep.sleep(0, Some(at), || false, || {});
        assert_eq!(outcome, SleepOutcome::Parked);
        assert!(Instant::now() >= at);
        assert_eq!(sleep.state(0), AWAKE);
        assert_eq!(sleep.sleepers(), 0);
    }

    #[test]
    fn notify_worker_wakes_exactly_that_sleeper() {
        let sleep = std::sync::Arc::new(Sleep::new(2));
        let sleepers: Vec<_> = (0..2)
            .map(|w| {
                let sleep = sleep.clone();
                std::thread::spawn(move || {
                    sleep.register(w);
                    sleep.sleep(w, None, || false, || {})
                })
            })
            .collect();
        assert!(
            wait_until(Duration::from_secs(10), || sleep.sleepers() == 2),
            "the two workers never went to sleep"
        );
        sleep.notify_worker(1);
        let mut sleepers = sleepers.into_iter();
        let first = sleepers.next().unwrap();
        let second = sleepers.next().unwrap();
        assert_eq!(second.join().unwrap(), SleepOutcome::Parked);
        assert_eq!(sleep.state(1), AWAKE);
        assert_eq!(sleep.state(0), SLEEPING, "worker 0 was not addressed");
        assert_eq!(sleep.sleepers(), 1);
        sleep.notify_one(0);
        assert_eq!(first.join().unwrap(), SleepOutcome::Parked);
        assert_eq!(sleep.sleepers(), 0);
        // Nobody sleeps: a notify is a no-op and must not disturb the states.
        sleep.notify_all();
        assert_eq!((sleep.state(0), sleep.state(1)), (AWAKE, AWAKE));
    }
}
