//! The work-stealing executor: worker threads, their queues, and the loop each worker runs.
//!
//! The executor knows nothing of what an item does. A [`WorkerLogic`] (the Luau worker, or a test
//! double) is built on each worker thread and owns whatever that thread keeps (VMs, tasks); the
//! executor moves items and messages to it, decides when it runs, and puts the thread to sleep when
//! there is nothing to do. It never touches Luau, so loom can model it.
//!
//! # The worker loop
//!
//! Each round, in this order: drain the inbox (replies and wake-ups are cheap and unblock tasks),
//! one [`WorkerLogic::poll`] step (tasks the worker already holds), then at most one new item (own
//! deque, then the injector, then siblings' deques in a rotating order), unless the logic holds
//! off new items for a moment ([`WorkerLogic::hold_items_until`]). A round that did none of
//! these is idle; after a few idle rounds spent spinning the worker sleeps through
//! [`Sleep`] until woken or until the time its last `poll` asked for.
//!
//! Every call into the logic runs under `catch_unwind`: a panic is counted, handed to
//! [`WorkerLogic::on_panic`], and the thread goes on serving.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use crossbeam_utils::CachePadded;

use super::deques::{Inbox, Injector, LocalQueue, Stealer};
use super::sleep::Sleep;
use super::spin::{spin, SPIN_ROUNDS};
use super::stats::{WorkerCounters, WorkerStats};
use crate::sync::{thread, Arc, AtomicBool, Mutex, Ordering};

/// What a worker thread does with the items and messages the executor hands it.
///
/// Built on its own thread by the `make` function given to [`Executor::start`], so it may hold
/// `!Send` state (Luau VMs); it is dropped on that thread after [`on_shutdown`](Self::on_shutdown).
pub trait WorkerLogic: Sized + 'static {
    /// A unit of work any worker may take: queued, injected, or stolen.
    type Item: Send + 'static;
    /// A message for one particular worker (a reply, a wake-up for a parked task).
    type Message: Send + 'static;

    /// Runs one item taken from a queue (local deque, injector, or stolen).
    fn run_item(&mut self, item: Self::Item, cx: &WorkerContext<'_, Self>);

    /// Handles one message posted to this worker's inbox.
    fn on_message(&mut self, msg: Self::Message, cx: &WorkerContext<'_, Self>);

    /// Runs a bounded step of the work the worker already holds (ready tasks). Returning
    /// [`Poll::Idle`] with a `wake_at` makes a sleeping worker wake by then without a push.
    fn poll(&mut self, cx: &WorkerContext<'_, Self>) -> Poll;

    /// A panic escaped `run_item`, `on_message` or `poll`. The payload is handed over so the
    /// logic can report it and rebuild what it must; the thread keeps serving afterwards.
    fn on_panic(&mut self, payload: Box<dyn std::any::Any + Send>, cx: &WorkerContext<'_, Self>);

    /// The worker found no work through its spinning rounds and would sleep now, having done
    /// its last work at `idle_since` (or started then): a bounded step of housekeeping that can
    /// wait for an idle thread (the Luau worker makes the state its next VM starts from).
    /// [`Housekeeping::Nothing`] by default.
    fn on_idle(&mut self, idle_since: Instant, now: Instant) -> Housekeeping {
        let _ = (idle_since, now);
        Housekeeping::Nothing
    }

    /// The executor is shutting down: drop per-thread state here, on this thread.
    fn on_shutdown(&mut self) {}

    /// Until when the worker leaves new items to its siblings, if it should: while a task it
    /// holds waits on an answer due within microseconds (a query forwarded to an engine
    /// thread). That task resumes on this thread only; an item taken meanwhile would run
    /// before it, or park beside it, while a sibling that is waking to take the item finds
    /// nothing. The executor honours it only when there are siblings. `None` by default.
    fn hold_items_until(&self) -> Option<Instant> {
        None
    }
}

/// What a [`WorkerLogic::on_idle`] step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Housekeeping {
    /// Some work: the worker looks for items again instead of sleeping.
    Done,
    /// Nothing now; there is some to do once the worker is still idle at this time, so it
    /// sleeps no later.
    At(Instant),
    /// Nothing to do.
    Nothing,
}

/// What a [`WorkerLogic::poll`] step found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Poll {
    /// It did some work and may have more: poll again next round.
    Busy,
    /// Nothing is ready. `wake_at` is when something will be (a timer), if ever.
    Idle {
        /// The earliest time the worker should poll again even if nothing is pushed.
        wake_at: Option<Instant>,
    },
}

/// Messages handled per round at most, so a flooding producer cannot starve polls and items.
const INBOX_BATCH: usize = 256;

/// The executor: shared queues, the per-worker inboxes, sleep state and stats, and the threads.
///
/// `Send + Sync`; shared as an `Arc`. The worker threads hold clones of that `Arc` until
/// [`shutdown`](Self::shutdown), so its owner must call `shutdown` (the pool's `Drop` does) or
/// the threads live on.
///
/// Generic over what it carries (items `I`, messages `M`), not over the logic that runs them:
/// code that only injects or posts names the executor without naming the logic. The worker
/// threads' logic is chosen once, by [`start`](Self::start).
pub struct Executor<I, M> {
    injector: Injector<I>,
    stealers: Box<[Stealer<I>]>,
    inboxes: Box<[CachePadded<Inbox<M>>]>,
    sleep: Sleep,
    stats: Box<[CachePadded<WorkerCounters>]>,
    shutdown: AtomicBool,
    handles: Mutex<Vec<thread::JoinHandle<()>>>,
}

impl<I: Send + 'static, M: Send + 'static> Executor<I, M> {
    /// Starts `threads` workers, named `skein-worker-{i}`. `make(i)` runs on worker `i`'s new
    /// thread to build its logic.
    ///
    /// # Panics
    ///
    /// If `threads` is 0, or the OS refuses to start a thread.
    pub fn start<W, F>(threads: usize, make: F) -> Arc<Self>
    where
        W: WorkerLogic<Item = I, Message = M>,
        F: Fn(usize) -> W + Send + Sync + 'static,
    {
        assert!(threads > 0, "an executor needs at least one worker thread");
        let locals: Vec<LocalQueue<I>> = (0..threads).map(|_| LocalQueue::new()).collect();
        let executor = Arc::new(Self {
            injector: Injector::new(),
            stealers: locals.iter().map(LocalQueue::stealer).collect(),
            inboxes: (0..threads)
                .map(|_| CachePadded::new(Inbox::new()))
                .collect(),
            sleep: Sleep::new(threads),
            stats: (0..threads).map(|_| CachePadded::default()).collect(),
            shutdown: AtomicBool::new(false),
            handles: Mutex::new(Vec::with_capacity(threads)),
        });
        // `make` is only shared, never part of a protocol, so a std `Arc` suffices under loom too.
        let make = std::sync::Arc::new(make);
        let handles = locals
            .into_iter()
            .enumerate()
            .map(|(index, local)| {
                let executor = Arc::clone(&executor);
                let make = std::sync::Arc::clone(&make);
                thread::Builder::new()
                    .name(format!("skein-worker-{index}"))
                    .spawn(move || run_worker(executor, index, local, &*make))
                    .expect("failed to start a skein worker thread")
            })
            .collect();
        *executor.handles.lock().unwrap_or_else(|e| e.into_inner()) = handles;
        executor
    }

    /// How many worker threads this executor runs.
    pub fn threads(&self) -> usize {
        self.inboxes.len()
    }

    /// Queues `item` for any worker, from any thread, and wakes a sleeping worker to take it.
    pub fn inject(&self, item: I) {
        self.injector.push(item);
        self.sleep.notify_one(0);
    }

    /// Posts `msg` to worker `worker`'s inbox and wakes that worker if it sleeps.
    ///
    /// # Panics
    ///
    /// If `worker >= self.threads()`.
    pub fn post(&self, worker: usize, msg: M) {
        self.inboxes[worker].push(msg);
        self.sleep.notify_worker(worker);
    }

    /// One row per worker, in worker order.
    pub fn stats(&self) -> Vec<WorkerStats> {
        self.stats
            .iter()
            .enumerate()
            .map(|(worker, counters)| counters.snapshot(worker))
            .collect()
    }

    /// Whether [`shutdown`](Self::shutdown) has been called.
    pub fn is_shut_down(&self) -> bool {
        self.shutdown.load(Ordering::Acquire)
    }

    /// Stops the workers: each finishes the call it is in, runs
    /// [`WorkerLogic::on_shutdown`], and exits; this waits for all of them. Items and messages
    /// still queued are dropped with the executor. Idempotent.
    ///
    /// Called from a worker thread (from inside the logic) it only raises the flag and wakes the
    /// others: a thread cannot wait for itself.
    pub fn shutdown(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
        self.sleep.notify_all();
        if self.sleep.current_worker().is_some() {
            return;
        }
        // Joining under the lock makes a concurrent second caller wait until the threads are gone.
        let mut handles = self.handles.lock().unwrap_or_else(|e| e.into_inner());
        for handle in handles.drain(..) {
            // A worker only ends early if `make` panicked; that panic was already reported.
            let _ = handle.join();
        }
    }

    /// Whether worker `index` has anything it could take, or should stop. The sleep protocol's
    /// re-check: it must cover every source the worker loop takes from.
    fn has_work_for(&self, index: usize, local: &LocalQueue<I>) -> bool {
        self.shutdown.load(Ordering::SeqCst)
            || !self.inboxes[index].is_empty()
            || !local.is_empty()
            || !self.injector.is_empty()
            || self
                .stealers
                .iter()
                .enumerate()
                .any(|(i, s)| i != index && !s.is_empty())
    }
}

/// What the logic sees of its worker while it runs.
pub struct WorkerContext<'a, W: WorkerLogic> {
    index: usize,
    executor: &'a Arc<Executor<W::Item, W::Message>>,
    local: &'a LocalQueue<W::Item>,
}

impl<W: WorkerLogic> WorkerContext<'_, W> {
    /// This worker's index, `0..threads`.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Queues `item` on this worker's own deque: it runs here unless a sibling steals it first,
    /// and a sleeping sibling is woken to do so.
    pub fn push_local(&self, item: W::Item) {
        self.local.push(item);
        self.executor.sleep.notify_one(self.index + 1);
    }

    /// The executor this worker belongs to, to inject or post from inside the logic.
    pub fn executor(&self) -> &Arc<Executor<W::Item, W::Message>> {
        self.executor
    }

    /// Records how many VMs this worker's thread holds, for [`Executor::stats`].
    pub fn set_vms_held(&self, n: usize) {
        self.executor.stats[self.index].set_vms_held(n);
    }

    /// Records that this worker started a keyed item, delivered to it outside the queues, after
    /// it waited `waited` for its key's VM. It counts in `items_run` like any other item.
    pub fn keyed_item_started(&self, waited: std::time::Duration) {
        let counters = &self.executor.stats[self.index];
        counters.item_run();
        counters.key_waited(waited);
    }

    fn counters(&self) -> &WorkerCounters {
        &self.executor.stats[self.index]
    }
}

/// A worker thread's whole life: register, build the logic, serve, shut down.
fn run_worker<W: WorkerLogic>(
    executor: Arc<Executor<W::Item, W::Message>>,
    index: usize,
    local: LocalQueue<W::Item>,
    make: &(impl Fn(usize) -> W + ?Sized),
) {
    executor.sleep.register(index);
    let mut logic = make(index);
    let cx = WorkerContext {
        index,
        executor: &executor,
        local: &local,
    };
    let mut worker = WorkerLoop {
        cx,
        steal_from: index + 1,
        idle_rounds: 0,
    };
    worker.serve(&mut logic);
    // Shutdown runs once; a panic in it is only counted, the thread is ending anyway.
    if catch_unwind(AssertUnwindSafe(|| logic.on_shutdown())).is_err() {
        worker.cx.counters().panicked();
    }
}

/// The per-thread state of the loop described in the module docs.
struct WorkerLoop<'a, W: WorkerLogic> {
    cx: WorkerContext<'a, W>,
    /// Where the next round of sibling steals starts, so no sibling is always asked first.
    steal_from: usize,
    idle_rounds: u32,
}

impl<W: WorkerLogic> WorkerLoop<'_, W> {
    fn serve(&mut self, logic: &mut W) {
        let executor = self.cx.executor;
        // The start of the last round, while that round did work: it is counted busy up to the
        // start of the next, so a round reads the clock once, not once at each end.
        let mut busy_since: Option<Instant> = None;
        // When the worker last did work (or started): what `on_idle` is told.
        let mut idle_since = Instant::now();
        while !executor.shutdown.load(Ordering::Acquire) {
            let round = Instant::now();
            if let Some(since) = busy_since.take() {
                self.cx
                    .counters()
                    .add_busy(round.saturating_duration_since(since));
            }
            let mut progressed = false;

            for _ in 0..INBOX_BATCH {
                let Some(msg) = executor.inboxes[self.cx.index].pop() else {
                    break;
                };
                progressed = true;
                self.guarded(logic, |logic, cx| logic.on_message(msg, cx));
            }

            let mut wake_at = None;
            match self.guarded(logic, |logic, cx| logic.poll(cx)) {
                Some(Poll::Busy) | None => progressed = true,
                Some(Poll::Idle { wake_at: at }) => wake_at = at,
            }

            let hold = logic
                .hold_items_until()
                .filter(|at| *at > round && executor.threads() > 1);
            if let Some(at) = hold {
                wake_at = Some(wake_at.map_or(at, |w: Instant| w.min(at)));
            } else if let Some(item) = self.take_item() {
                progressed = true;
                self.cx.counters().item_run();
                self.guarded(logic, |logic, cx| logic.run_item(item, cx));
            }

            if progressed {
                busy_since = Some(round);
                idle_since = round;
                self.idle_rounds = 0;
            } else if self.idle_rounds < SPIN_ROUNDS {
                self.idle_rounds += 1;
                spin(self.idle_rounds);
            } else {
                self.idle_rounds = 0;
                // Housekeeping waits until the worker would sleep: an item that comes while it
                // spins (the next of a stream) finds it free.
                match self.guarded(logic, |logic, _| logic.on_idle(idle_since, round)) {
                    Some(Housekeeping::Done) => {}
                    Some(Housekeeping::At(at)) => {
                        let at = wake_at.map_or(at, |w: Instant| w.min(at));
                        self.sleep(Some(at), hold.is_some());
                    }
                    Some(Housekeeping::Nothing) | None => self.sleep(wake_at, hold.is_some()),
                }
            }
        }
        if let Some(since) = busy_since {
            self.cx.counters().add_busy(since.elapsed());
        }
    }

    #[cold]
    /// Sleeps until woken or `wake_at`. A worker `holding` off new items (it ends by
    /// `wake_at`) wakes only for its inbox: queued items are its siblings' to take meanwhile,
    /// and a worker that woke for them would only spin past them.
    fn sleep(&self, wake_at: Option<Instant>, holding: bool) {
        let executor = self.cx.executor;
        let index = self.cx.index;
        if wake_at.is_some_and(|at| at <= Instant::now()) {
            return; // A timer is already due: poll again instead.
        }
        let has_work = || {
            if holding {
                executor.shutdown.load(Ordering::SeqCst) || !executor.inboxes[index].is_empty()
            } else {
                executor.has_work_for(index, self.cx.local)
            }
        };
        executor
            .sleep
            .sleep(index, wake_at, has_work, || self.cx.counters().slept());
    }

    /// At most one item: own deque, then the injector, then siblings in rotating order.
    fn take_item(&mut self) -> Option<W::Item> {
        let executor = self.cx.executor;
        if let Some(item) = self.cx.local.pop() {
            return Some(item);
        }
        if let Some(item) = executor.injector.steal_batch_and_pop(self.cx.local) {
            return Some(item);
        }
        let n = executor.stealers.len();
        let start = self.steal_from;
        self.steal_from = (start + 1) % n;
        for k in 0..n {
            let victim = (start + k) % n;
            if victim == self.cx.index {
                continue;
            }
            if let Some(item) = executor.stealers[victim].steal() {
                self.cx.counters().stole();
                return Some(item);
            }
        }
        None
    }

    /// Calls into the logic with panics contained. `None` means the call panicked (and
    /// `on_panic` has been told).
    fn guarded<R>(
        &self,
        logic: &mut W,
        call: impl FnOnce(&mut W, &WorkerContext<'_, W>) -> R,
    ) -> Option<R> {
        match catch_unwind(AssertUnwindSafe(|| call(logic, &self.cx))) {
            Ok(value) => Some(value),
            Err(payload) => {
                self.contain_panic(logic, payload);
                None
            }
        }
    }

    #[cold]
    fn contain_panic(&self, logic: &mut W, payload: Box<dyn std::any::Any + Send>) {
        let counters = self.cx.counters();
        counters.panicked();
        let reported = catch_unwind(AssertUnwindSafe(|| logic.on_panic(payload, &self.cx)));
        if let Err(second) = reported {
            counters.panicked();
            // Dropping a payload can panic too; that one is swallowed, the thread must live on.
            let _ = catch_unwind(AssertUnwindSafe(move || drop(second)));
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::executor::wait_until;
    use std::sync::atomic::{AtomicU32, AtomicUsize};
    use std::sync::mpsc;
    use std::time::Duration;

    /// Items and messages are closures; the logic records panics and can run a one-shot timer.
    struct Closures {
        panics: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
        timer: Option<(Instant, mpsc::Sender<Instant>)>,
        shutdowns: std::sync::Arc<AtomicUsize>,
    }

    type Item = Box<dyn FnOnce(&WorkerContext<'_, Closures>) + Send>;
    type Message = Box<dyn FnOnce(usize) + Send>;

    impl WorkerLogic for Closures {
        type Item = Item;
        type Message = Message;

        fn run_item(&mut self, item: Item, cx: &WorkerContext<'_, Self>) {
            item(cx);
        }

        fn on_message(&mut self, msg: Message, cx: &WorkerContext<'_, Self>) {
            msg(cx.index());
        }

        fn poll(&mut self, _cx: &WorkerContext<'_, Self>) -> Poll {
            match &self.timer {
                Some((at, _)) if Instant::now() < *at => Poll::Idle { wake_at: Some(*at) },
                Some(_) => {
                    let (_, fired) = self.timer.take().unwrap();
                    fired.send(Instant::now()).unwrap();
                    Poll::Busy
                }
                None => Poll::Idle { wake_at: None },
            }
        }

        fn on_panic(
            &mut self,
            payload: Box<dyn std::any::Any + Send>,
            _cx: &WorkerContext<'_, Self>,
        ) {
            let text = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            self.panics.lock().unwrap().push(text);
        }

        fn on_shutdown(&mut self) {
            self.shutdowns.fetch_add(1, Ordering::SeqCst);
        }
    }

    struct Harness {
        executor: Arc<Executor<Item, Message>>,
        panics: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
        shutdowns: std::sync::Arc<AtomicUsize>,
    }

    fn start(threads: usize) -> Harness {
        start_with_timer(threads, None)
    }

    fn start_with_timer(
        threads: usize,
        timer: Option<(Instant, mpsc::Sender<Instant>)>,
    ) -> Harness {
        let panics = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let shutdowns = std::sync::Arc::new(AtomicUsize::new(0));
        let timer = std::sync::Mutex::new(timer);
        let executor = Executor::start(threads, {
            let panics = panics.clone();
            let shutdowns = shutdowns.clone();
            move |_| Closures {
                panics: panics.clone(),
                timer: timer.lock().unwrap().take(),
                shutdowns: shutdowns.clone(),
            }
        });
        Harness {
            executor,
            panics,
            shutdowns,
        }
    }

    fn total(stats: &[WorkerStats], field: impl Fn(&WorkerStats) -> u64) -> u64 {
        stats.iter().map(field).sum()
    }

    #[test]
    fn smoke_one_item_runs_and_is_counted() {
        let h = start(2);
        assert_eq!(h.executor.threads(), 2);
        let (tx, rx) = mpsc::channel();
        h.executor
            .inject(Box::new(move |cx| tx.send(cx.index()).unwrap()));
        let worker = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(worker < 2);
        h.executor.shutdown();
        let stats = h.executor.stats();
        assert_eq!(stats.len(), 2);
        assert_eq!(stats[0].worker, 0);
        assert_eq!(stats[1].worker, 1);
        assert_eq!(total(&stats, |s| s.items_run), 1);
        assert_eq!(total(&stats, |s| s.panics), 0);
    }

    #[test]
    fn every_injected_item_runs_exactly_once() {
        const N: usize = 5_000;
        let h = start(2);
        let runs: std::sync::Arc<Vec<AtomicU32>> =
            std::sync::Arc::new((0..N).map(|_| AtomicU32::new(0)).collect());
        let done = std::sync::Arc::new(AtomicUsize::new(0));
        for i in 0..N {
            let runs = runs.clone();
            let done = done.clone();
            h.executor.inject(Box::new(move |_| {
                runs[i].fetch_add(1, Ordering::Relaxed);
                done.fetch_add(1, Ordering::Release);
            }));
        }
        assert!(wait_until(Duration::from_secs(10), || done
            .load(Ordering::Acquire)
            == N));
        h.executor.shutdown();
        assert!(runs.iter().all(|r| r.load(Ordering::Relaxed) == 1));
        assert_eq!(total(&h.executor.stats(), |s| s.items_run), N as u64);
    }

    #[test]
    fn local_items_get_stolen_by_the_idle_sibling() {
        const N: usize = 40;
        let h = start(2);
        let ran_on: std::sync::Arc<std::sync::Mutex<Vec<usize>>> = Default::default();
        let ran = ran_on.clone();
        h.executor.inject(Box::new(move |cx| {
            for _ in 0..N {
                let ran = ran.clone();
                cx.push_local(Box::new(move |cx| {
                    // Blocking-ish: long enough that the sibling wakes and steals meanwhile.
                    std::thread::sleep(Duration::from_millis(2));
                    ran.lock().unwrap().push(cx.index());
                }));
            }
        }));
        assert!(wait_until(Duration::from_secs(10), || ran_on
            .lock()
            .unwrap()
            .len()
            == N));
        h.executor.shutdown();
        let stats = h.executor.stats();
        assert!(total(&stats, |s| s.steals) > 0, "{stats:?}");
        let ran_on = ran_on.lock().unwrap();
        assert!(ran_on.contains(&0) && ran_on.contains(&1), "{ran_on:?}");
        assert_eq!(total(&stats, |s| s.items_run), N as u64 + 1);
    }

    #[test]
    fn post_reaches_the_named_worker_on_its_thread() {
        let h = start(3);
        // Let everyone fall asleep first so the posts must wake them.
        assert!(wait_until(Duration::from_secs(5), || h
            .executor
            .sleep
            .sleepers()
            == 3));
        let (tx, rx) = mpsc::channel();
        for worker in [2, 0, 1] {
            let tx = tx.clone();
            h.executor.post(
                worker,
                Box::new(move |index| {
                    let name = std::thread::current().name().unwrap().to_owned();
                    tx.send((worker, index, name)).unwrap();
                }),
            );
        }
        for _ in 0..3 {
            let (to, index, name) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
            assert_eq!(to, index);
            assert_eq!(name, format!("skein-worker-{to}"));
        }
        h.executor.shutdown();
    }

    #[test]
    fn idle_workers_sleep_and_an_inject_wakes_one() {
        let h = start(2);
        assert!(wait_until(Duration::from_secs(5), || h
            .executor
            .sleep
            .sleepers()
            == 2));
        let stats = h.executor.stats();
        assert!(stats.iter().all(|s| s.sleeps >= 1), "{stats:?}");
        let (tx, rx) = mpsc::channel();
        h.executor.inject(Box::new(move |_| tx.send(()).unwrap()));
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
        h.executor.shutdown();
    }

    #[test]
    fn a_panicking_item_does_not_kill_the_thread() {
        let h = start(1);
        h.executor.inject(Box::new(|_| panic!("item exploded")));
        h.executor.post(
            0,
            Box::new(|_| std::panic::panic_any(String::from("message exploded"))),
        );
        let (tx, rx) = mpsc::channel();
        h.executor
            .inject(Box::new(move |cx| tx.send(cx.index()).unwrap()));
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), 0);
        h.executor.shutdown();
        let stats = h.executor.stats();
        assert_eq!(stats[0].panics, 2);
        assert_eq!(stats[0].items_run, 2);
        let mut panics = h.panics.lock().unwrap().clone();
        panics.sort();
        assert_eq!(panics, ["item exploded", "message exploded"]);
    }

    #[test]
    fn idle_poll_with_wake_at_wakes_without_a_push() {
        let (tx, rx) = mpsc::channel();
        let set = Instant::now();
        let at = set + Duration::from_millis(60);
        let h = start_with_timer(1, Some((at, tx)));
        let fired = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(fired >= at);
        assert!(
            fired - at < Duration::from_secs(1),
            "woke {:?} late",
            fired - at
        );
        // It got there by sleeping, not by spinning for 60 ms.
        assert!(h.executor.stats()[0].sleeps >= 1);
        h.executor.shutdown();
    }

    #[test]
    fn shutdown_joins_every_worker_and_is_idempotent() {
        let h = start(2);
        h.executor.shutdown();
        assert!(h.executor.is_shut_down());
        assert_eq!(
            h.shutdowns.load(Ordering::SeqCst),
            2,
            "joined: on_shutdown already ran"
        );
        h.executor.shutdown();
        assert_eq!(h.shutdowns.load(Ordering::SeqCst), 2);
        // Queued after shutdown: nobody runs it, it is dropped with the executor.
        let dropped = std::sync::Arc::new(());
        let token = dropped.clone();
        h.executor.inject(Box::new(move |_| drop(token)));
        assert_eq!(std::sync::Arc::strong_count(&dropped), 2);
        assert_eq!(
            Arc::strong_count(&h.executor),
            1,
            "workers released the executor"
        );
        drop(h.executor);
        assert_eq!(std::sync::Arc::strong_count(&dropped), 1);
    }

    #[test]
    fn shutdown_from_inside_a_worker_does_not_deadlock() {
        let h = start(2);
        let (tx, rx) = mpsc::channel();
        h.executor.inject(Box::new(move |cx| {
            cx.executor().shutdown();
            tx.send(()).unwrap();
        }));
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
        h.executor.shutdown();
        assert_eq!(h.shutdowns.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn vms_held_is_reported_per_worker() {
        let h = start(2);
        let (tx, rx) = mpsc::channel();
        for worker in 0..2 {
            let tx = tx.clone();
            h.executor
                .post(worker, Box::new(move |_| tx.send(()).unwrap()));
        }
        h.executor
            .inject(Box::new(move |cx| cx.set_vms_held(cx.index() + 7)));
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(wait_until(Duration::from_secs(5), || {
            h.executor
                .stats()
                .iter()
                .any(|s| s.vms_held == s.worker + 7)
        }));
        h.executor.shutdown();
    }

    /// Several producers, items that fan out locally, exact counts at the end.
    fn stress(threads: usize, producers: usize, per_producer: usize) {
        let h = start(threads);
        let done = std::sync::Arc::new(AtomicUsize::new(0));
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(producers));
        let joins: Vec<_> = (0..producers)
            .map(|_| {
                let executor = h.executor.clone();
                let done = done.clone();
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    barrier.wait();
                    for i in 0..per_producer {
                        let done = done.clone();
                        executor.inject(Box::new(move |cx| {
                            if i % 4 == 0 {
                                // Fan out: one more item on the local deque, stealable.
                                let done = done.clone();
                                cx.push_local(Box::new(move |_| {
                                    done.fetch_add(1, Ordering::Relaxed);
                                }));
                            }
                            done.fetch_add(1, Ordering::Relaxed);
                        }));
                    }
                })
            })
            .collect();
        for join in joins {
            join.join().unwrap();
        }
        let expected = producers * (per_producer + per_producer.div_ceil(4));
        assert!(
            wait_until(Duration::from_secs(60), || done.load(Ordering::Relaxed)
                == expected),
            "{} of {expected}",
            done.load(Ordering::Relaxed)
        );
        h.executor.shutdown();
        assert_eq!(total(&h.executor.stats(), |s| s.items_run), expected as u64);
    }

    #[test]
    fn stress_small() {
        stress(2, 3, 2_000);
    }

    #[test]
    #[ignore = "large: run with --ignored (CI does: .ci/run)"]
    fn stress_large() {
        stress(4, 4, 250_000);
    }

    /// Housekeeping due once the worker has been idle for `after`: it records when it ran and
    /// since when the worker was idle, then is due again only after the next item.
    struct Tidy {
        after: Duration,
        due: bool,
        done: mpsc::Sender<(Instant, Instant)>,
    }

    impl WorkerLogic for Tidy {
        type Item = Instant;
        type Message = ();

        fn run_item(&mut self, _ran: Instant, _cx: &WorkerContext<'_, Self>) {
            self.due = true;
        }

        fn on_message(&mut self, _msg: (), _cx: &WorkerContext<'_, Self>) {}

        fn poll(&mut self, _cx: &WorkerContext<'_, Self>) -> Poll {
            Poll::Idle { wake_at: None }
        }

        fn on_panic(&mut self, _: Box<dyn std::any::Any + Send>, _: &WorkerContext<'_, Self>) {}

        fn on_idle(&mut self, idle_since: Instant, now: Instant) -> Housekeeping {
            if !self.due {
                return Housekeeping::Nothing;
            }
            if now < idle_since + self.after {
                return Housekeeping::At(idle_since + self.after);
            }
            self.due = false;
            self.done.send((idle_since, now)).unwrap();
            Housekeeping::Done
        }
    }

    #[test]
    fn housekeeping_due_later_wakes_a_sleeping_worker_and_counts_idleness_from_the_last_item() {
        let after = Duration::from_millis(20);
        let (tx, rx) = mpsc::channel();
        let started = Instant::now();
        let tx = std::sync::Mutex::new(tx);
        let executor = Executor::start(1, move |_| Tidy {
            after,
            due: true,
            done: tx.lock().unwrap().clone(),
        });
        // Nothing is pushed: only the wake the housekeeping asked for brings the worker back.
        let (since, ran) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(since >= started, "idle from the worker's start");
        assert!(ran >= since + after, "ran {:?} after idling", ran - since);
        assert!(
            rx.recv_timeout(Duration::from_millis(100)).is_err(),
            "done once until the next item"
        );

        let pushed = Instant::now();
        executor.inject(pushed);
        let (since, ran) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(since >= pushed, "idleness counts from the item's round");
        assert!(ran >= since + after, "ran {:?} after idling", ran - since);
        executor.shutdown();
    }
}
