//! The task scheduler of one VM: coroutines parked on time, on promises, or deferred.
//!
//! Every piece of Luau that Skein runs is a *task*: a coroutine the scheduler resumes. A task
//! parks by calling one of the primitives below and then yielding (the yield itself happens in
//! the Luau prelude, because a Rust callback cannot yield). Parked tasks sit in the structure
//! that matches their reason (a heap keyed by wake time for timers, a waiter list on the promise
//! for awaits), so nothing is polled. A task that yields without parking is treated as deferred.
//!
//! The scheduler never holds a borrow of its own state while Luau runs: a running task may spawn
//! or cancel tasks, which re-enters it.
//!
//! Coroutines are resumed with the raw API (`coroutine.rs`). A root task started with
//! [`start_root`] (a pool worker's job) runs its first run *fresh*: outside the task table, on
//! the running stack only, and enters the table only when something asks for it (it parks,
//! spawns a coroutine, is named by `task.cancel`) or it stays suspended. A job that returns in
//! its first run so costs no table insert or removal, no index, no completion closure.

use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::ffi::c_void;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mlua::{ffi, FromLuaMulti, IntoLuaMulti, Lua, MultiValue, Thread};
use rustc_hash::FxHashMap as HashMap;

use super::budget::{CancelToken, Interruption, RunGuard, RunTokens};
use super::coroutine::{self, Resumed};
use super::liveness::Liveness;
use super::out_of_memory::is_memory_error;
use super::owner::{Owner, TaskFailure};
use super::signal_waits::{SignalKind, SignalWaits, Waiter, MAX_SIGNAL_WAITERS};
use crate::principal::capability::{self, Authority};
use crate::principal::profile::{self, ProfileKind, ProfileSink};
use crate::value::{ExactValues, Message};

/// Identifies a task within its VM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct TaskId(u64);

/// What a task waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Parked {
    /// Runnable: queued in `ready` or running.
    No,
    /// In the timer heap.
    Timer,
    /// On a promise's waiter list.
    Promise,
    /// On the waiter list of a promise of pool work (`jobs.dispatch`, `jobs.parallelFor`,
    /// `jobs.warm`): counted, so a worker VM can bound how many of its tasks wait on the pool.
    PoolPromise,
    /// In the frame-wait heap (`task.waitFrames`).
    Frame,
    /// On a signal's waiter list (`events.wait`, `engine.wait`), and in the timer heap when
    /// it has a timeout.
    Signal,
}

struct TaskEntry {
    thread: Thread,
    /// The thread's address, the key of `by_thread`: read once, as reading it costs a lock and
    /// a call into Luau.
    address: *const c_void,
    owner: Rc<Owner>,
    parked: Parked,
    /// Bumped on every park so stale timer-heap entries are skipped.
    epoch: u64,
    /// The root task of an owner completes it.
    root: bool,
}

/// A root task in its first run, not in the task table yet (see [`start_root`]).
struct FreshTask {
    id: TaskId,
    /// The coroutine, owned by `start_root`'s frame for the whole run: entering the table
    /// clones it from there.
    thread: *const Thread,
    address: *const c_void,
    owner: Rc<Owner>,
}

/// A timed wait in the heap: (wake time, insertion order, task, the task's park epoch, start).
/// The epoch tells a stale entry (the task was cancelled or re-parked) from a live one.
type TimerEntry = (Instant, u64, TaskId, u64, Instant);

/// A frame wait in its heap: (target frame, insertion order, task, the task's park epoch, the
/// frame it parked on).
type FrameEntry = (u64, u64, TaskId, u64, u64);

/// What a parked task waits on, as [`Scheduler::parked`] answers it.
#[derive(Clone, Debug)]
pub(crate) enum ParkedOn {
    /// A promise (its waiter list names the task).
    Promise,
    /// `task.waitFrames`.
    Frames,
    /// A timer: `task.wait`, or a `task.delay` not started yet (`delay`).
    Timer { delay: bool },
    /// A signal: `events.wait` or `engine.wait` of the named event.
    Signal { kind: SignalKind, name: Arc<str> },
}

/// The value a task is resumed with.
pub(crate) enum Resume {
    /// Arguments (a task's first resume, or a plain defer).
    Args(MultiValue),
    /// A timer fired: the task receives the seconds elapsed since this instant.
    Elapsed(Instant),
    /// The frame a `task.waitFrames` waited for came: the task receives the frames that passed.
    Frames(u64),
    /// The signal a task waited on came: it receives the event's payload.
    Signal(Message),
    /// A signal wait's timeout passed first: the task receives `nil, "timeout"`.
    Timeout,
}

/// The clock a VM's timers read: `task.wait`, `task.delay` and the timeouts of signal waits.
#[derive(Clone, Copy, Debug, Default)]
enum Clock {
    /// The wall clock: a VM no frame drives (a pool worker's, an actor's, an engine VM the
    /// host only pumps).
    #[default]
    Wall,
    /// Frame time: `now` moves by each frame's `dt` (`ScriptDomain::advance`), and by the wall
    /// time a blocking pump waited for its next timer (`eval`, `run_until_idle`), never by
    /// itself.
    Frame { now: Instant },
}

/// The scheduler state of one VM.
#[derive(Default)]
pub(crate) struct Scheduler {
    next_id: u64,
    tasks: HashMap<TaskId, TaskEntry>,
    by_thread: HashMap<*const c_void, TaskId>,
    ready: VecDeque<(TaskId, Resume)>,
    timers: BinaryHeap<Reverse<TimerEntry>>,
    timer_seq: u64,
    frame_waits: BinaryHeap<Reverse<FrameEntry>>,
    deferred: Vec<(TaskId, MultiValue)>,
    /// Arguments of `task.delay` tasks, given on their first resume instead of the elapsed time.
    delayed_args: HashMap<TaskId, MultiValue>,
    /// The task being resumed, innermost last (resumes nest when a task spawns another).
    running: Vec<TaskId>,
    /// Root tasks in their first run that nothing has asked for yet (see [`start_root`]).
    fresh: Vec<FreshTask>,
    /// Tasks parked as [`Parked::PoolPromise`].
    pool_waits: usize,
    /// Coroutines of root tasks that returned, kept to run the next job: resetting one costs a
    /// fraction of making a new one.
    idle_threads: Vec<Thread>,
    /// The principal's evidence of progress, when its host asked for a stall check.
    liveness: Option<Arc<Liveness>>,
    /// The clock the timers read.
    clock: Clock,
    /// Tasks parked as [`Parked::Signal`], on their signals' lists.
    signals: SignalWaits,
}

/// How many finished coroutines a VM keeps for reuse.
const IDLE_THREADS: usize = 32;

/// Sets a task's parked state, keeping `pool_waits` the count of tasks parked on pool work.
/// and its owner's count with it.
fn set_parked(pool_waits: &mut usize, task: &mut TaskEntry, to: Parked) {
    if task.parked == Parked::PoolPromise {
        *pool_waits -= 1;
        task.owner.count_pool_wait(false);
    }
    if to == Parked::PoolPromise {
        *pool_waits += 1;
        task.owner.count_pool_wait(true);
    }
    task.parked = to;
}

impl Scheduler {
    /// Registers `thread` as a task owned by `owner`.
    ///
    /// A root task (`Vm::start` resumes it at once) enters the thread index only when it first
    /// stays suspended: while it runs, [`task_of`](Self::task_of) finds it on the running
    /// stack, so a call that returns in its first run never touches the index.
    pub(crate) fn add(&mut self, thread: Thread, owner: Rc<Owner>, root: bool) -> TaskId {
        self.next_id += 1;
        let id = TaskId(self.next_id);
        let address = thread.to_pointer();
        if !root {
            self.by_thread.insert(address, id);
        }
        self.tasks.insert(
            id,
            TaskEntry {
                thread,
                address,
                owner,
                parked: Parked::No,
                epoch: 0,
                root,
            },
        );
        id
    }

    /// The task a Luau thread belongs to. A fresh root task (see [`start_root`]) enters the
    /// task table here: whoever asks will park it, cancel it or spawn under it by its id.
    pub(crate) fn task_of(&mut self, thread: &Thread) -> Option<TaskId> {
        self.task_at(thread.to_pointer())
    }

    /// The task of the Luau thread at `address` (its `lua_State`, as `Thread::to_pointer`
    /// answers it); a fresh root task enters the task table, as in [`task_of`](Self::task_of).
    pub(crate) fn task_at(&mut self, address: *const c_void) -> Option<TaskId> {
        if let Some(id) = self.by_thread.get(&address) {
            return Some(*id);
        }
        if let Some(i) = self.fresh.iter().position(|f| f.address == address) {
            let fresh = self.fresh.swap_remove(i);
            // SAFETY: `start_root` holds the thread for as long as its entry is fresh.
            let thread = unsafe { (*fresh.thread).clone() };
            self.tasks.insert(
                fresh.id,
                TaskEntry {
                    thread,
                    address,
                    owner: fresh.owner,
                    parked: Parked::No,
                    epoch: 0,
                    root: true,
                },
            );
            return Some(fresh.id);
        }
        // A root task in its first run is not indexed yet (see `add`); it is on the stack.
        self.running
            .iter()
            .rev()
            .copied()
            .find(|id| self.tasks.get(id).is_some_and(|t| t.address == address))
    }

    /// Puts a task that stays suspended in the thread index (a root task's first yield).
    fn index(&mut self, id: TaskId) {
        if let Some(task) = self.tasks.get(&id) {
            self.by_thread.insert(task.address, id);
        }
    }

    /// Whether a task is still live (not finished, failed or cancelled). Ids are never reused.
    pub(crate) fn is_live(&self, id: TaskId) -> bool {
        self.tasks.contains_key(&id) || self.fresh.iter().any(|f| f.id == id)
    }

    /// The task running now (innermost).
    pub(crate) fn running(&self) -> Option<TaskId> {
        self.running.last().copied()
    }

    /// The owner of a task.
    pub(crate) fn owner(&self, id: TaskId) -> Option<Rc<Owner>> {
        match self.tasks.get(&id) {
            Some(t) => Some(t.owner.clone()),
            None => self
                .fresh
                .iter()
                .find(|f| f.id == id)
                .map(|f| f.owner.clone()),
        }
    }

    /// Queues a task to run on the next step.
    pub(crate) fn make_ready(&mut self, id: TaskId, resume: Resume) {
        if let Some(live) = &self.liveness {
            live.touch();
        }
        if let Some(task) = self.tasks.get_mut(&id) {
            set_parked(&mut self.pool_waits, task, Parked::No);
            task.epoch += 1;
            self.ready.push_back((id, resume));
        }
    }

    /// Queues a task for the next deferred batch.
    pub(crate) fn defer(&mut self, id: TaskId) {
        self.defer_with(id, MultiValue::new());
    }

    /// Queues a task for the next deferred batch, resumed with `args`.
    pub(crate) fn defer_with(&mut self, id: TaskId, args: MultiValue) {
        if let Some(live) = &self.liveness {
            live.touch();
        }
        if let Some(task) = self.tasks.get_mut(&id) {
            set_parked(&mut self.pool_waits, task, Parked::No);
            task.epoch += 1;
            self.deferred.push((id, args));
        }
    }

    /// Parks a new task until `wake_at`; its first resume gets `args`.
    pub(crate) fn delay_with(&mut self, id: TaskId, wake_at: Instant, args: MultiValue) {
        self.delayed_args.insert(id, args);
        self.park_timer(id, wake_at, wake_at);
    }

    /// Parks a task until `wake_at`; it resumes with the seconds elapsed since `start`.
    pub(crate) fn park_timer(&mut self, id: TaskId, start: Instant, wake_at: Instant) {
        if let Some(task) = self.tasks.get_mut(&id) {
            if let Some(live) = &self.liveness {
                live.timer_at(to_wall(self.clock, wake_at));
            }
            set_parked(&mut self.pool_waits, task, Parked::Timer);
            task.epoch += 1;
            self.timer_seq += 1;
            self.timers
                .push(Reverse((wake_at, self.timer_seq, id, task.epoch, start)));
        }
    }

    /// Parks a task until the frame counter reaches `target`; `now` is the frame it parks on.
    pub(crate) fn park_frames(&mut self, id: TaskId, now: u64, target: u64) {
        if let Some(task) = self.tasks.get_mut(&id) {
            if let Some(live) = &self.liveness {
                live.frames_at(target.saturating_sub(now));
            }
            set_parked(&mut self.pool_waits, task, Parked::Frame);
            task.epoch += 1;
            self.timer_seq += 1;
            self.frame_waits
                .push(Reverse((target, self.timer_seq, id, task.epoch, now)));
        }
    }

    /// Queues the tasks whose target frame `frame` has reached. Answers whether any woke.
    pub(crate) fn wake_frames(&mut self, frame: u64) -> bool {
        let mut woke = false;
        while let Some(Reverse((target, _, id, epoch, parked_on))) =
            self.frame_waits.peek().copied()
        {
            if target > frame {
                break;
            }
            self.frame_waits.pop();
            if let Some(task) = self.tasks.get_mut(&id) {
                if task.epoch == epoch && task.parked == Parked::Frame {
                    task.parked = Parked::No;
                    self.ready
                        .push_back((id, Resume::Frames(frame.saturating_sub(parked_on))));
                    woke = true;
                }
            }
        }
        woke
    }

    /// Whether a task waits on frames (stale entries of ended tasks count until their frame).
    pub(crate) fn has_frame_waits(&self) -> bool {
        !self.frame_waits.is_empty()
    }

    /// Marks a task as parked on a promise (the promise keeps the waiter list); `pool`: a
    /// promise of pool work.
    pub(crate) fn park_promise(&mut self, id: TaskId, pool: bool) {
        let to = if pool {
            Parked::PoolPromise
        } else {
            Parked::Promise
        };
        if let Some(task) = self.tasks.get_mut(&id) {
            set_parked(&mut self.pool_waits, task, to);
            task.epoch += 1;
        }
    }

    /// How many tasks wait on promises of pool work.
    pub(crate) fn pool_waits(&self) -> usize {
        self.pool_waits
    }

    /// Whether nothing is queued, deferred or timed at all.
    fn is_idle(&self) -> bool {
        self.ready.is_empty() && self.deferred.is_empty() && self.timers.is_empty()
    }

    /// Whether a poll of this VM has nothing to do: nothing queued, deferred, timed or waiting
    /// on frames (a step would run nothing and no wake time would come of it).
    pub(crate) fn is_quiet(&self) -> bool {
        self.is_idle() && self.frame_waits.is_empty() && self.signals.len() == 0
    }

    /// Whether something can run right now.
    pub(crate) fn has_ready(&self) -> bool {
        !self.ready.is_empty()
            || !self.deferred.is_empty()
            || self
                .timers
                .peek()
                .is_some_and(|Reverse(t)| t.0 <= self.now())
    }

    /// Now, on the clock this VM's timers read.
    pub(crate) fn now(&self) -> Instant {
        match self.clock {
            Clock::Wall => Instant::now(),
            Clock::Frame { now } => now,
        }
    }

    /// Moves the clock on by a frame's `dt`: from the first call on, the timers read frame
    /// time (see [`Clock::Frame`]). A `dt` of zero fires nothing new.
    pub(crate) fn advance_clock(&mut self, dt: Duration) {
        let now = self.now();
        let now = now.checked_add(dt.min(MAX_WAIT)).unwrap_or(now);
        self.clock = Clock::Frame { now };
    }

    /// On frame time, moves the clock on by the wall time since `waited_from`: a blocking pump
    /// (`eval`, `run_until_idle`) waits on the wall clock for the next timer, which is then due.
    pub(crate) fn add_waited(&mut self, waited_from: Instant) {
        if let Clock::Frame { now } = self.clock {
            let waited = waited_from.elapsed();
            self.clock = Clock::Frame {
                now: now.checked_add(waited).unwrap_or(now),
            };
        }
    }

    /// Parks a task on the signal `name` of `kind`, after the tasks already waiting on it;
    /// `since`: the first engine-event sequence number it may take (0 for domain events).
    /// With a `timeout`, it also waits in the timer heap and resumes with `nil, "timeout"`
    /// when that comes first. Answers the count of waiters when the VM holds its limit
    /// ([`MAX_SIGNAL_WAITERS`]) and nothing was parked.
    pub(crate) fn park_signal(
        &mut self,
        id: TaskId,
        kind: SignalKind,
        name: &str,
        since: u64,
        timeout: Option<Duration>,
    ) -> Result<(), usize> {
        if self.signals.len() >= MAX_SIGNAL_WAITERS {
            return Err(self.signals.len());
        }
        let now = self.now();
        let Some(task) = self.tasks.get_mut(&id) else {
            return Ok(());
        };
        set_parked(&mut self.pool_waits, task, Parked::Signal);
        task.epoch += 1;
        let epoch = task.epoch;
        self.signals.push(
            kind,
            name,
            Waiter {
                task: id,
                epoch,
                since,
            },
        );
        if let Some(timeout) = timeout {
            let wake_at = now + timeout;
            if let Some(live) = &self.liveness {
                live.timer_at(to_wall(self.clock, wake_at));
            }
            self.timer_seq += 1;
            self.timers
                .push(Reverse((wake_at, self.timer_seq, id, epoch, now)));
        }
        Ok(())
    }

    /// Releases the waiters of the signal `name` of `kind` that may take the event numbered
    /// `seq` (any, for domain events: pass `u64::MAX`), in arrival order, each resumed with a
    /// copy of `payload`. Answers how many were released.
    pub(crate) fn release_signal(
        &mut self,
        kind: SignalKind,
        name: &str,
        seq: u64,
        payload: &Message,
    ) -> usize {
        if self.signals.len() == 0 {
            return 0;
        }
        let mut released = 0;
        for waiter in self.signals.take(kind, name, seq) {
            let Some(task) = self.tasks.get_mut(&waiter.task) else {
                continue;
            };
            if task.epoch != waiter.epoch || task.parked != Parked::Signal {
                continue;
            }
            task.parked = Parked::No;
            task.epoch += 1;
            self.ready
                .push_back((waiter.task, Resume::Signal(payload.clone())));
            released += 1;
        }
        if released > 0 {
            if let Some(live) = &self.liveness {
                live.touch();
            }
        }
        released
    }

    /// Whether a task waits on a signal of `kind`, and the smallest `since` among them.
    pub(crate) fn signal_waits_since(&self, kind: SignalKind) -> Option<u64> {
        if !self.signals.any_of(kind) {
            return None;
        }
        self.signals.earliest_since(kind)
    }

    /// Whether any task waits on a signal.
    pub(crate) fn has_signal_waits(&self) -> bool {
        self.signals.len() > 0
    }

    /// The earliest live timer, if any. Timers are removed lazily (a cancelled or ended task
    /// leaves its entry in the heap), so stale entries at the top are dropped first: a
    /// cancelled `task.delay(20, f)` must not keep a host waiting 20 s for nothing.
    pub(crate) fn next_wake(&mut self) -> Option<Instant> {
        while let Some(Reverse((at, _, id, epoch, _))) = self.timers.peek().copied() {
            let live = self.tasks.get(&id).is_some_and(|task| {
                task.epoch == epoch && matches!(task.parked, Parked::Timer | Parked::Signal)
            });
            if live {
                return Some(to_wall(self.clock, at));
            }
            self.timers.pop();
        }
        None
    }

    /// Reports this VM's progress to `live` from now on (a principal whose host asked for a
    /// stall check).
    pub(crate) fn watch(&mut self, live: Arc<Liveness>) {
        self.liveness = Some(live);
    }

    /// Work outside a resume that still counts as the VM running for the stall check (making a
    /// failure's text, compiling a module): [`Running::run`] marks it.
    pub(crate) fn counted_as_running(&self) -> Running {
        Running(self.liveness.clone())
    }

    /// The tasks parked now and what on, oldest first: what a stall report names.
    pub(crate) fn parked(&self) -> Vec<(TaskId, Thread, ParkedOn)> {
        let mut parked: Vec<(TaskId, Thread, ParkedOn)> = self
            .tasks
            .iter()
            .filter_map(|(&id, task)| {
                let on = match task.parked {
                    Parked::No => return None,
                    Parked::Promise | Parked::PoolPromise => ParkedOn::Promise,
                    Parked::Frame => ParkedOn::Frames,
                    Parked::Timer => ParkedOn::Timer {
                        delay: self.delayed_args.contains_key(&id),
                    },
                    Parked::Signal => match self.signals.signal_of(id) {
                        Some((kind, name)) => ParkedOn::Signal { kind, name },
                        None => return None,
                    },
                };
                Some((id, task.thread.clone(), on))
            })
            .collect();
        parked.sort_by_key(|(id, _, _)| *id);
        parked
    }

    /// Number of live tasks.
    pub(crate) fn len(&self) -> usize {
        self.tasks.len() + self.fresh.len()
    }

    /// Takes the batch of work due now: timers due, the deferred batch, then the ready queue.
    /// Work queued while this batch runs waits for the next step.
    fn take_batch(&mut self, now: Instant) -> Vec<(TaskId, Resume)> {
        while let Some(Reverse((at, _, id, epoch, start))) = self.timers.peek().copied() {
            if at > now {
                break;
            }
            self.timers.pop();
            if let Some(task) = self.tasks.get_mut(&id) {
                if task.epoch == epoch && task.parked == Parked::Timer {
                    task.parked = Parked::No;
                    let resume = match self.delayed_args.remove(&id) {
                        Some(args) => Resume::Args(args),
                        None => Resume::Elapsed(start),
                    };
                    self.ready.push_back((id, resume));
                } else if task.epoch == epoch && task.parked == Parked::Signal {
                    // The timeout came first: off the list now, so no later event can
                    // resume it.
                    task.parked = Parked::No;
                    task.epoch += 1;
                    self.signals.remove(id);
                    self.ready.push_back((id, Resume::Timeout));
                }
            }
        }
        for (id, args) in std::mem::take(&mut self.deferred) {
            self.ready.push_back((id, Resume::Args(args)));
        }
        self.ready.drain(..).collect()
    }

    /// A finished coroutine to reuse, if one is kept.
    pub(crate) fn take_idle_thread(&mut self) -> Option<Thread> {
        self.idle_threads.pop()
    }

    /// Keeps a finished coroutine (its stack empty) for the next root task, up to the bound.
    fn keep_idle_thread(&mut self, thread: Thread) {
        if self.idle_threads.len() < IDLE_THREADS {
            self.idle_threads.push(thread);
        }
    }

    /// Removes a task (finished, failed or cancelled).
    fn remove(&mut self, id: TaskId) -> Option<TaskEntry> {
        let entry = self.tasks.remove(&id)?;
        if entry.parked == Parked::PoolPromise {
            self.pool_waits -= 1;
            entry.owner.count_pool_wait(false);
        }
        if entry.parked == Parked::Signal {
            self.signals.remove(id);
        }
        self.by_thread.remove(&entry.address);
        self.delayed_args.remove(&id);
        Some(entry)
    }

    /// Removes every task of `owner`, answering their ids and threads so the caller can close
    /// them.
    pub(crate) fn remove_owner(&mut self, owner: &Rc<Owner>) -> (Vec<TaskId>, Vec<Thread>) {
        // A fresh root of the owner is forgotten too: its run files nothing when it ends.
        self.fresh.retain(|f| !Rc::ptr_eq(&f.owner, owner));
        let ids: Vec<TaskId> = self
            .tasks
            .iter()
            .filter(|(_, t)| Rc::ptr_eq(&t.owner, owner))
            .map(|(id, _)| *id)
            .collect();
        let threads = ids
            .iter()
            .filter_map(|id| self.remove(*id).map(|e| e.thread))
            .collect();
        (ids, threads)
    }

    /// Removes one task by its thread (task.cancel).
    pub(crate) fn remove_thread(&mut self, thread: &Thread) -> bool {
        match self.task_of(thread) {
            Some(id) => self.remove(id).is_some(),
            None => false,
        }
    }
}

/// What a VM's scheduler needs from the VM around it.
pub(crate) trait SchedulerVm {
    /// The scheduler of this VM.
    fn scheduler(&self) -> &RefCell<Scheduler>;
    /// Turns a resume value into Luau values (promise outcomes are converted here).
    fn resume_values(&self, lua: &Lua, resume: Resume) -> MultiValue;
    /// A root task finished: its owner completes with the values or the failure.
    fn complete(&self, lua: &Lua, owner: &Rc<Owner>, result: Result<MultiValue, TaskFailure>);
    /// A non-root task failed: report it, attributed to its owner.
    fn report(&self, owner: &Rc<Owner>, failure: TaskFailure);
    /// The text of the value `thread` raised, when `message` (mlua's text for it) is the bare
    /// `table: 0x...` of a table it raised with `error`.
    fn raised_text(&self, lua: &Lua, thread: &Thread, message: &str) -> Option<String>;
    /// The Luau stack of `thread` (a coroutine that just failed), as `debug.traceback` gives it.
    fn traceback(&self, thread: &Thread) -> String;
    /// The text of an out-of-memory failure of a task, naming the VM and its limit; the VM
    /// records that it reached its limit.
    fn out_of_memory(&self) -> String;
    /// After an outermost resume: collects the garbage of a VM that is full (see
    /// `MemoryLabel::collect_when_full`).
    fn collect_when_full(&self, lua: &Lua);
    /// The authority of tasks whose owner carries none (the VM's principal's grant).
    fn authority(&self) -> Option<&Arc<Authority>>;
    /// The token that stops every run of the VM once set (a pool worker VM's principal's).
    fn halt(&self) -> Option<&CancelToken>;
    /// Where each run of a task goes as a span, if anywhere (a profiled engine VM's sink).
    fn profile(&self) -> Option<&Arc<dyn ProfileSink>>;
}

/// Runs one step: the timers due now, the deferred batch, then the ready queue, each task once.
/// Answers how many tasks it resumed.
pub(crate) fn step<V: SchedulerVm>(vm: &V, lua: &Lua) -> usize {
    if vm.scheduler().borrow().is_idle() {
        return 0; // the common case on a busy worker: no clock read
    }
    let now = vm.scheduler().borrow().now();
    let batch = vm.scheduler().borrow_mut().take_batch(now);
    let ran = batch.len();
    for (id, resume) in batch {
        resume_task(vm, lua, id, resume);
    }
    ran
}

/// Resumes the tasks that are ready now (a settled promise's waiters) and whose owner `of`
/// picks, each once, and nothing else: no other task, no timer, no deferred work; the rest
/// stay queued in their order. A frame joining its pool work resumes its handlers' waiters
/// with this, so every other task and the frame's deferred drains keep their place in the
/// frame. Answers whether any task ran.
pub(crate) fn resume_ready_of<V: SchedulerVm>(
    vm: &V,
    lua: &Lua,
    mut of: impl FnMut(&Rc<Owner>) -> bool,
) -> bool {
    let batch: Vec<(TaskId, Resume)> = {
        let mut sched = vm.scheduler().borrow_mut();
        let sched = &mut *sched;
        let mut picked = Vec::new();
        let mut rest = VecDeque::with_capacity(sched.ready.len());
        for (id, resume) in sched.ready.drain(..) {
            if sched.tasks.get(&id).is_some_and(|t| of(&t.owner)) {
                picked.push((id, resume));
            } else {
                rest.push_back((id, resume));
            }
        }
        sched.ready = rest;
        picked
    };
    let ran = !batch.is_empty();
    for (id, resume) in batch {
        resume_task(vm, lua, id, resume);
    }
    ran
}

/// Resumes one task under its owner's deadline and files the outcome.
pub(crate) fn resume_task<V: SchedulerVm>(vm: &V, lua: &Lua, id: TaskId, resume: Resume) {
    resume_and_file(vm, lua, id, resume);
    // After the task was filed: a task that failed is gone, and its stack with it. Only after
    // an outermost resume: a nested one (task.spawn's) runs inside a task that still holds
    // what it built, and a collection per spawned task would cost a full heap each.
    if vm.scheduler().borrow().running.is_empty() {
        vm.collect_when_full(lua);
    }
}

fn resume_and_file<V: SchedulerVm>(vm: &V, lua: &Lua, id: TaskId, resume: Resume) {
    let (thread, owner, liveness) = {
        let mut sched = vm.scheduler().borrow_mut();
        let sched = &mut *sched;
        let Some(task) = sched.tasks.get_mut(&id) else {
            return; // cancelled meanwhile
        };
        set_parked(&mut sched.pool_waits, task, Parked::No);
        let out = (
            task.thread.clone(),
            task.owner.clone(),
            sched.liveness.clone(),
        );
        sched.running.push(id);
        out
    };
    if owner.is_cancelled() {
        vm.scheduler().borrow_mut().running.pop();
        finish(vm, lua, id, &owner, Err(TaskFailure::cancelled()), false);
        return;
    }
    if owner.is_bounded() {
        if let Some(bound) = owner.bound_passed(Instant::now()) {
            out_of_bound(vm, lua, id, &owner, bound);
            return;
        }
    }
    let args = vm.resume_values(lua, resume);
    let profiled = vm.profile().map(|sink| (sink, Instant::now()));
    let (result, stopped) = run_guarded(vm, lua, &owner, liveness.as_deref(), || {
        resume_with(lua, &thread, args)
    });
    if let Some((sink, started)) = profiled {
        profile_run(vm, &**sink, &owner, started);
    }
    vm.scheduler().borrow_mut().running.pop();
    match result {
        Err(panic) => {
            let failure = TaskFailure::panicked(&panic);
            finish(vm, lua, id, &owner, Err(failure), false);
        }
        Ok(Err(err)) => {
            let failure = failure_of(vm, lua, &thread, &err, stopped);
            finish(vm, lua, id, &owner, Err(failure), false);
        }
        Ok(Ok(None)) => stays_suspended(vm, id),
        // Returned: the coroutine is finished, so it can run the next root task.
        Ok(Ok(Some(values))) => finish(vm, lua, id, &owner, Ok(values), true),
    }
}

/// Sends the run of `owner`'s task that began at `started` and ended now to `sink`, attributed
/// to the authority it ran under (its owner's, or the VM's).
fn profile_run<V: SchedulerVm>(vm: &V, sink: &dyn ProfileSink, owner: &Owner, started: Instant) {
    if let Some(authority) = owner.authority.as_ref().or_else(|| vm.authority()) {
        let attribution = authority.attribution().clone();
        let name = owner.identity.to_string();
        profile::emit(
            sink,
            ProfileKind::EngineRun,
            attribution,
            name,
            started,
            None,
        );
    }
}

/// Runs `body` (a resume) as a run of `owner`'s: under its authority (or the VM's), its
/// deadline and cancel token, counted by the liveness watch; a panic is caught and answered.
/// Answers what the interrupt stopped the run for, if it did.
#[inline(always)]
fn run_guarded<V: SchedulerVm, T>(
    vm: &V,
    lua: &Lua,
    owner: &Owner,
    liveness: Option<&Liveness>,
    body: impl FnOnce() -> T,
) -> (std::thread::Result<T>, Option<Interruption>) {
    // Authority follows the task: its owner's (a pool item's, from its dispatcher), or the
    // VM's own. Installed for this resume only, and removed when it yields or returns.
    let authority = owner.authority.as_ref().or_else(|| vm.authority());
    let installed = capability::install(authority);
    let tokens = RunTokens {
        job: owner.cancel_token(),
        vm: vm.halt(),
    };
    let guard = RunGuard::start(lua, owner.deadline, tokens);
    if let Some(live) = liveness {
        live.enter();
    }
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body));
    if let Some(live) = liveness {
        live.leave();
    }
    let stopped = guard.stopped();
    drop(guard);
    drop(installed);
    (result, stopped)
}

/// Resumes a task's coroutine with `args`, as mlua's `Thread::resume` does: refuses a coroutine
/// that can't be resumed, pushes the arguments on the calling state and moves them over, and
/// answers the values it returned (read as [`ExactValues`]), or `None` when it yielded.
fn resume_with(lua: &Lua, thread: &Thread, args: MultiValue) -> mlua::Result<Option<MultiValue>> {
    coroutine::check_resumable(lua, thread)?;
    let co = thread.state();
    let nargs = lua.exec_raw_lua(|raw| {
        let state = raw.state();
        // SAFETY: the arguments are pushed on the calling state under mlua's contract for
        // `push_into_stack_multi` (what mlua's `Thread::resume` does), then moved to the
        // coroutine after room was made there; on failure the calling state's top is put back.
        unsafe {
            let top = ffi::lua_gettop(state);
            let pushed = args.push_into_stack_multi(raw).and_then(|n| {
                if n > 0 && ffi::lua_checkstack(co, n) == 0 {
                    return Err(mlua::Error::StackError);
                }
                Ok(n)
            });
            match pushed {
                Ok(n) => {
                    ffi::lua_xmove(state, co, n);
                    Ok(n)
                }
                Err(e) => {
                    ffi::lua_settop(state, top);
                    Err(e)
                }
            }
        }
    })?;
    // SAFETY: the coroutine belongs to this VM, is resumable (checked) and holds its
    // arguments on top.
    match unsafe { coroutine::resume(lua, thread, nargs) } {
        Resumed::Returned(n) => returned_values(lua, co, n).map(Some),
        Resumed::Yielded => Ok(None),
        Resumed::Raised(err) => Err(err),
    }
}

/// The `n` values a coroutine returned, read as [`ExactValues`] after moving them to the
/// calling state (as `Thread::resume` read them); both stacks are left as they were before.
fn returned_values(
    lua: &Lua,
    co: *mut ffi::lua_State,
    n: std::ffi::c_int,
) -> mlua::Result<MultiValue> {
    lua.exec_raw_lua(|raw| {
        let state = raw.state();
        // SAFETY: the values sit at the coroutine's top; room for them is made on the calling
        // state before they move, and both tops are restored after the read.
        unsafe {
            let top = ffi::lua_gettop(state);
            let read = if ffi::lua_checkstack(state, n + 1) == 0 {
                Err(mlua::Error::StackError)
            } else {
                ffi::lua_xmove(co, state, n);
                ExactValues::from_stack_multi(n, raw).map(|v| v.0)
            };
            ffi::lua_settop(state, top);
            ffi::lua_settop(co, 0);
            read
        }
    })
}

/// The failure a run that raised `err` ends with: the interrupt's reason when it stopped the
/// run, the VM's out-of-memory text, or the raised message with its stack.
#[cold]
fn failure_of<V: SchedulerVm>(
    vm: &V,
    lua: &Lua,
    thread: &Thread,
    err: &mlua::Error,
    stopped: Option<Interruption>,
) -> TaskFailure {
    // Making the failure copies and searches a message as long as the VM holds, after the
    // resume has left: it counts as running, or a stall check would take a slow one for a VM
    // that can never progress.
    vm.scheduler()
        .borrow()
        .counted_as_running()
        .run(|| make_failure(vm, lua, thread, err, stopped))
}

/// Work that counts as its VM running for the stall check (see
/// [`Scheduler::counted_as_running`]).
pub(crate) struct Running(Option<Arc<Liveness>>);

impl Running {
    /// Runs `f`, counted as a resume under way.
    pub(crate) fn run<R>(self, f: impl FnOnce() -> R) -> R {
        if let Some(live) = &self.0 {
            live.enter();
        }
        let result = f();
        if let Some(live) = &self.0 {
            live.leave();
        }
        result
    }
}

/// [`failure_of`]'s work.
fn make_failure<V: SchedulerVm>(
    vm: &V,
    lua: &Lua,
    thread: &Thread,
    err: &mlua::Error,
    stopped: Option<Interruption>,
) -> TaskFailure {
    match stopped {
        Some(Interruption::Deadline(d)) => TaskFailure::deadline(d),
        Some(Interruption::Cancelled) => TaskFailure::cancelled(),
        None if is_memory_error(err) => {
            TaskFailure::raised(vm.out_of_memory(), vm.traceback(thread))
        }
        None => {
            // mlua appends the stack of the failed coroutine to a runtime error; keep the two
            // apart, and ask Luau for the stack when mlua gave none. Searched from the end,
            // where mlua put it: a raised message may be as long as the VM holds.
            let full = super::error_message(err);
            let (message, stack) = match full.rsplit_once("\nstack traceback:\n") {
                Some((message, stack)) => (
                    message.to_owned(),
                    format!("stack traceback:\n{}", stack.trim_end()),
                ),
                None => (full, vm.traceback(thread)),
            };
            let message = vm.raised_text(lua, thread, &message).unwrap_or(message);
            TaskFailure::raised(message, without_error_wrapper(stack))
        }
    }
}

/// A task that yielded: indexed by its thread, and run again on the next step when nothing
/// parked it (a plain `coroutine.yield`).
fn stays_suspended<V: SchedulerVm>(vm: &V, id: TaskId) {
    let mut sched = vm.scheduler().borrow_mut();
    sched.index(id);
    let bare_yield = sched.tasks.get(&id).is_some_and(|t| t.parked == Parked::No)
        && !sched.ready.iter().any(|(r, _)| *r == id)
        && !sched.deferred.iter().any(|(r, _)| *r == id);
    if bare_yield {
        sched.defer(id);
    }
}

/// A coroutine for a new root task, its stack empty: a finished one kept for reuse, or a new
/// one (see [`start_root`]).
pub(crate) fn root_coroutine<V: SchedulerVm>(vm: &V, lua: &Lua) -> mlua::Result<Thread> {
    let idle = vm.scheduler().borrow_mut().take_idle_thread();
    match idle {
        Some(thread) => Ok(thread),
        None => coroutine::new_coroutine(lua),
    }
}

/// Gives back a coroutine from [`root_coroutine`] that was not started; its stack is empty.
pub(crate) fn return_coroutine<V: SchedulerVm>(vm: &V, thread: Thread) {
    vm.scheduler().borrow_mut().keep_idle_thread(thread);
}

/// How the first run of a root task started with [`start_root`] ended.
pub(crate) enum RootEnd<'a> {
    /// It returned `count` values, at indices `1..=count` of `thread`'s stack (read them in
    /// place; the stack is cleared after).
    Returned {
        thread: &'a Thread,
        count: std::ffi::c_int,
    },
    /// It failed, was cancelled, or passed its deadline.
    Failed(TaskFailure),
}

/// Runs the first run of a root task of `owner` on `thread` (from [`root_coroutine`]), whose
/// stack holds its function and `nargs` arguments, and hands how it ended to `end` while the
/// values it returned are still on its stack. Answers `None` when the task stays suspended
/// (it goes on as any task; the caller sets the owner's completion now, which its end runs)
/// or was removed while it ran.
///
/// The task runs *fresh*: it is on the running stack but in no table, and enters the task
/// table only when something asks for it (see [`Scheduler::task_of`]); so a task that returns
/// in its first run costs no table insert or removal. Everything else is as for any task's
/// resume: the owner's authority, deadline, cancel token and bound, the liveness watch, a
/// panic contained, failures worded the same.
pub(crate) fn start_root<V: SchedulerVm, R>(
    vm: &V,
    lua: &Lua,
    thread: Thread,
    nargs: std::ffi::c_int,
    owner: &Rc<Owner>,
    end: impl FnOnce(RootEnd<'_>) -> R,
) -> Option<R> {
    let address = thread.state() as *const c_void;
    let (id, liveness) = {
        let mut sched = vm.scheduler().borrow_mut();
        sched.next_id += 1;
        let id = TaskId(sched.next_id);
        sched.fresh.push(FreshTask {
            id,
            thread: &thread,
            address,
            owner: owner.clone(),
        });
        sched.running.push(id);
        (id, sched.liveness.clone())
    };
    let early = if owner.is_cancelled() {
        Some(TaskFailure::cancelled())
    } else if owner.is_bounded() {
        owner.bound_passed(Instant::now()).map(TaskFailure::Bound)
    } else {
        None
    };
    if let Some(failure) = early {
        let mut sched = vm.scheduler().borrow_mut();
        sched.running.pop();
        sched.fresh.retain(|f| f.id != id);
        drop(sched);
        return Some(end(RootEnd::Failed(failure)));
    }
    let (result, stopped) = run_guarded(vm, lua, owner, liveness.as_deref(), || {
        // SAFETY: the coroutine is this VM's, not running, and holds its function and
        // arguments (the caller's contract).
        unsafe { coroutine::resume(lua, &thread, nargs) }
    });
    let was_fresh = {
        let mut sched = vm.scheduler().borrow_mut();
        sched.running.pop();
        match sched.fresh.iter().rposition(|f| f.id == id) {
            Some(i) => {
                sched.fresh.swap_remove(i);
                true
            }
            None => false,
        }
    };
    let ended = if was_fresh {
        end_fresh(vm, lua, id, thread, owner, (result, stopped), end)
    } else {
        end_filed(vm, lua, id, thread, (result, stopped), end)
    };
    if vm.scheduler().borrow().running.is_empty() {
        vm.collect_when_full(lua);
    }
    ended
}

/// What a run answered: the resume (or the panic it raised) and why the interrupt stopped it.
type RunResult = (std::thread::Result<Resumed>, Option<Interruption>);

/// The end of a first run that nothing asked for: it never entered the task table.
fn end_fresh<V: SchedulerVm, R>(
    vm: &V,
    lua: &Lua,
    id: TaskId,
    thread: Thread,
    owner: &Rc<Owner>,
    (result, stopped): RunResult,
    end: impl FnOnce(RootEnd<'_>) -> R,
) -> Option<R> {
    match result {
        Err(panic) => Some(end(RootEnd::Failed(TaskFailure::panicked(&panic)))),
        Ok(Resumed::Raised(err)) => {
            let failure = failure_of(vm, lua, &thread, &err, stopped);
            Some(end(RootEnd::Failed(failure)))
        }
        Ok(Resumed::Returned(count)) => {
            let ended = end(RootEnd::Returned {
                thread: &thread,
                count,
            });
            // SAFETY: the coroutine has returned; clearing its stack frees it for reuse.
            unsafe { ffi::lua_settop(thread.state(), 0) };
            vm.scheduler().borrow_mut().keep_idle_thread(thread);
            Some(ended)
        }
        Ok(Resumed::Yielded) => {
            // Nothing parked it (parking asks for the task, which files it): a plain
            // `coroutine.yield`. It enters the table now and runs again on the next step.
            let address = thread.state() as *const c_void;
            let mut sched = vm.scheduler().borrow_mut();
            sched.tasks.insert(
                id,
                TaskEntry {
                    thread,
                    address,
                    owner: owner.clone(),
                    parked: Parked::No,
                    epoch: 0,
                    root: true,
                },
            );
            drop(sched);
            stays_suspended(vm, id);
            None
        }
    }
}

/// The end of a first run that entered the task table while it ran: filed as any task's,
/// except that its end goes to `end` (the owner has no completion yet). A task removed while
/// it ran ends with nothing filed.
fn end_filed<V: SchedulerVm, R>(
    vm: &V,
    lua: &Lua,
    id: TaskId,
    thread: Thread,
    (result, stopped): RunResult,
    end: impl FnOnce(RootEnd<'_>) -> R,
) -> Option<R> {
    let failure = match result {
        Ok(Resumed::Yielded) => {
            stays_suspended(vm, id);
            return None;
        }
        Ok(Resumed::Returned(count)) => {
            vm.scheduler().borrow_mut().remove(id)?;
            let ended = end(RootEnd::Returned {
                thread: &thread,
                count,
            });
            // SAFETY: the coroutine has returned; clearing its stack frees it for reuse.
            unsafe { ffi::lua_settop(thread.state(), 0) };
            vm.scheduler().borrow_mut().keep_idle_thread(thread);
            return Some(ended);
        }
        Err(panic) => TaskFailure::panicked(&panic),
        Ok(Resumed::Raised(err)) => failure_of(vm, lua, &thread, &err, stopped),
    };
    vm.scheduler().borrow_mut().remove(id)?;
    Some(end(RootEnd::Failed(failure)))
}

/// A stack without the frame of the prelude's `error` (which keeps raised values, see
/// `raised.rs`): the script called `error`, and `[C]: in function 'error'` says so already.
fn without_error_wrapper(stack: String) -> String {
    if !stack.contains("\tskein prelude:") {
        return stack;
    }
    stack
        .lines()
        .filter(|line| {
            !(line.starts_with("\tskein prelude:") && line.ends_with("in function 'error'"))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A task of a bounded owner (a warm entry) is due after the bound passed: its root ends with
/// the bound failure; another task ends quietly, as the warm it belongs to is over.
#[cold]
fn out_of_bound<V: SchedulerVm>(vm: &V, lua: &Lua, id: TaskId, owner: &Rc<Owner>, bound: Duration) {
    let root = {
        let mut sched = vm.scheduler().borrow_mut();
        sched.running.pop();
        sched.tasks.get(&id).is_some_and(|t| t.root)
    };
    let failure = if root {
        TaskFailure::Bound(bound)
    } else {
        TaskFailure::cancelled()
    };
    finish(vm, lua, id, owner, Err(failure), false);
}

fn finish<V: SchedulerVm>(
    vm: &V,
    lua: &Lua,
    id: TaskId,
    owner: &Rc<Owner>,
    result: Result<MultiValue, TaskFailure>,
    reusable: bool,
) {
    let entry = vm.scheduler().borrow_mut().remove(id);
    let Some(entry) = entry else { return };
    // `reusable`: the task returned and its coroutine is finished (the caller read its status
    // once already; reading it again costs a Luau call).
    let root = entry.root;
    if root && reusable {
        vm.scheduler().borrow_mut().keep_idle_thread(entry.thread);
    }
    if root {
        vm.complete(lua, owner, result);
    } else if let Err(failure) = result {
        if !failure.is_cancelled() {
            vm.report(owner, failure);
        }
    }
}

/// `at` on the clock `clock` as a wall instant: what a host waits until, or a stall check reads.
fn to_wall(clock: Clock, at: Instant) -> Instant {
    match clock {
        Clock::Wall => at,
        Clock::Frame { now } => {
            let wall = Instant::now();
            wall.checked_add(at.saturating_duration_since(now))
                .unwrap_or(wall)
        }
    }
}

/// Seconds between `start` and `now` as Luau receives them.
pub(crate) fn elapsed_secs(start: Instant, now: Instant) -> f64 {
    now.saturating_duration_since(start).as_secs_f64()
}

/// The longest a timed wait may ask for, so `Instant` arithmetic never overflows.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(60 * 60 * 24 * 365);
