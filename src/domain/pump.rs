//! Pumping the domain on its engine thread: [`ScriptDomain::pump`] (one round, never blocks),
//! the blocking round the load, `eval` and [`ScriptDomain::run_until_idle`] are made of, and the
//! stall verdict that ends a run nothing can wake.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::domain::{stall_watch, ScriptDomain};
use crate::error::{Error, Result};
use crate::executor::wake_queue::Waited;
use crate::shared;
use crate::vm;

/// The longest `run_until_idle` waits between two frames while work is in flight, so tasks
/// waiting on frames (in the engine VM or on workers) see frames pass.
const FRAME_INTERVAL: Duration = Duration::from_millis(16);

/// How often `run_until_idle` looks for edited module sources while a script keeps it busy.
const SOURCE_CHECK_INTERVAL: Duration = Duration::from_millis(250);

/// What one [`pump`](ScriptDomain::pump) did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PumpReport {
    /// Promises of the engine VM it settled: results of pool work that reached the mailbox.
    pub settled: u64,
    /// Queries forwarded from workers that it answered.
    pub answered: u64,
    /// Commands recorded on workers that it applied.
    pub applied: u64,
    /// Tasks of the engine VM it resumed: the waiters of what it settled, timers due, deferred
    /// work, frame waits it ended.
    pub resumed: u64,
    /// Whether it handled anything from the mailbox or the engine-event log: the settlements,
    /// answers and commands above, or a report, a parcel, an event for a watcher.
    pub handled: bool,
}

impl PumpReport {
    /// Whether the pump did anything at all.
    pub fn did_anything(&self) -> bool {
        self.handled || self.settled + self.answered + self.applied + self.resumed > 0
    }
}

impl ScriptDomain {
    /// One round on the engine thread: drain the mailbox, move the frame counter on (waking
    /// frame waits), then run the tasks that are ready. Never blocks. Answers what it did.
    ///
    /// It runs no registered job and no phase: a host's frame loop calls
    /// [`advance`](Self::advance) (or [`frame`](Self::frame)), which joins the pool work its
    /// handlers await, and `pump` is for a host that waits on something between frames. Since
    /// it counts a frame, pumping inside a frame loop makes `task.waitFrames` end early
    /// (docs/embedding.md, "Driving a domain", compares the calls).
    ///
    /// ```
    /// use skein::{DomainSpec, Pool, ScriptDomain};
    ///
    /// let dir = tempfile::tempdir()?;
    /// std::fs::write(dir.path().join("m.luau"), "return { f = function() return 1 end }")?;
    /// let pool = Pool::new(1);
    /// let domain = ScriptDomain::new(&pool, DomainSpec::new("main").plan(skein::Plan::new().root(dir.path())))?;
    /// domain.exec(r#"task.spawn(function() done = jobs.dispatch("./m", "f"):await() end)"#)?;
    /// let mut report = domain.pump();
    /// while report.settled == 0 {
    ///     std::thread::yield_now();
    ///     report = domain.pump();
    /// }
    /// assert_eq!((report.settled, report.resumed), (1, 1));
    /// assert!(!domain.pump().did_anything());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn pump(&self) -> PumpReport {
        vm::check_sources();
        let services = &self.frames.services;
        let before = (
            services.settled.get(),
            services.forwarded.get(),
            services.applied.get(),
        );
        let handled = self.drain();
        let frame = self.current.principal.frames.fetch_add(1, Ordering::AcqRel) + 1;
        self.current.vm.wake_frames(frame);
        let resumed = self.current.vm.step_counted() as u64;
        // `forwarded` and `applied` restart at each frame: a service the pump ran may have
        // advanced the domain's frame (it is no scheduler entry), so the differences saturate.
        PumpReport {
            settled: services.settled.get().saturating_sub(before.0),
            answered: services.forwarded.get().saturating_sub(before.1),
            applied: services.applied.get().saturating_sub(before.2),
            resumed,
            handled,
        }
    }

    /// Pumps once; when `block` and nothing is ready, waits for the mailbox, the next timer or
    /// (with `jobs`) the next time registered jobs are due. With `jobs` the round runs the
    /// registered jobs as a frame does, when [`FRAME_INTERVAL`] has passed since they last
    /// ran. Answers false when nothing is outstanding at all (idle): no task, no pending
    /// promise, no timer, and (with `jobs`) no registered job that is neither paused nor
    /// errored.
    pub(super) fn pump_once(&self, block: bool, jobs: bool) -> bool {
        self.pump_once_until(block, jobs, None)
    }

    /// [`pump_once`](Self::pump_once), never waiting past `until` when it is given.
    pub(super) fn pump_once_until(&self, block: bool, jobs: bool, until: Option<Instant>) -> bool {
        let drained = self.drain();
        let frame = self.current.principal.frames.fetch_add(1, Ordering::AcqRel) + 1;
        let woke = self.current.vm.wake_frames(frame);
        let live_jobs = jobs && self.current.registry.has_work();
        let jobs_due = live_jobs.then(|| match self.frames.jobs_ran.get() {
            Some(at) => at + FRAME_INTERVAL,
            None => Instant::now(),
        });
        let ran_jobs = match jobs_due {
            Some(due) if due <= Instant::now() => {
                self.frames.jobs_ran.set(Some(Instant::now()));
                self.current.registry.run(&self.current.vm, None, self);
                true
            }
            _ => false,
        };
        if drained | woke | ran_jobs | self.current.vm.step() || self.current.vm.has_ready() {
            return true;
        }
        // A pop parked by a task that has since ended would otherwise count as pending forever.
        shared::sweep_parked_pops(&self.current.vm.lua);
        let pending = self.current.vm.core.promises.borrow().pending();
        let next = [self.current.vm.next_wake(), jobs_due]
            .into_iter()
            .flatten()
            .min();
        let frame_waits = self.current.vm.has_frame_waits();
        if pending == 0 && next.is_none() && !frame_waits {
            return false;
        }
        if !block {
            return true;
        }
        // Tasks here or work in flight may wait on frames: the next round (the next frame)
        // comes within one frame interval.
        let wait = match next {
            Some(at) => at.saturating_duration_since(Instant::now()),
            None => Duration::from_secs(3600),
        };
        let wait = if pending > 0 || frame_waits {
            wait.min(FRAME_INTERVAL)
        } else {
            wait
        };
        let wait = match until {
            Some(until) => wait.min(until.saturating_duration_since(Instant::now())),
            None => wait,
        };
        // One wake for everything that arrived: the first event sent while the engine thread
        // sleeps wakes it, and the drain takes the rest with it.
        let waited_from = Instant::now();
        let waited = self.current.rx.wait_until(waited_from.checked_add(wait));
        // The wait was on the wall clock: on frame time, the timer it waited for is due now.
        self.current.vm.add_waited(waited_from);
        if waited != Waited::TimedOut {
            self.drain_mailbox();
        }
        true
    }

    /// Pumps until every task and every promise the domain's scripts started has settled, and no
    /// registered job is left to run.
    ///
    /// Each round is a frame, and the registered jobs run in it too, at most once per frame
    /// interval (16 ms): so a job that runs every frame runs about 60 times a second here, and
    /// while only such jobs keep the domain busy it sleeps between their frames (handling the
    /// mailbox meanwhile) rather than spinning. A live registered job that is neither paused
    /// nor errored keeps the run going; cancelling the last one (say, from its own `run`) ends
    /// it.
    ///
    /// ```
    /// use skein::{DomainSpec, Message, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let domain = ScriptDomain::new(&pool, DomainSpec::new("main"))?;
    /// domain.exec(r#"
    ///     runs = 0
    ///     local job
    ///     job = jobs.register({ phase = "main", executor = { kind = "luau", run = function()
    ///         runs += 1
    ///         if runs == 3 then job:cancel() end
    ///     end } })
    /// "#)?;
    /// domain.run_until_idle()?;
    /// assert_eq!(domain.eval("return runs")?, Message::Number(3.0));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// The first failure of a script the host started ([`Error::Script`], with its Luau stack);
    /// it is also in [`take_reports`](Self::take_reports), as every failure is;
    /// [`Error::Interrupted`] once an [`InterruptHandle`](crate::InterruptHandle) interrupted
    /// the domain (it returns at its next round, at most one frame interval after the
    /// interrupt when it waits).
    pub fn run_until_idle(&self) -> Result<()> {
        vm::check_sources();
        let mut checked = Instant::now();
        let mut stall = stall_watch::StallWatch::default();
        // With a stall check, a round never waits long, so the check runs while the engine
        // VM waits on a far timer alone.
        let round = |live: &Option<Arc<vm::Liveness>>| {
            live.as_ref()
                .map(|_| Instant::now() + stall_watch::STALL_ROUND)
        };
        while self.pump_once_until(true, true, round(&self.current.principal.liveness)) {
            if self.life.interrupt.requested() {
                break;
            }
            // A script can run for minutes without returning to the host: look for edited
            // sources now and then, so an edit still reaches its next dispatch.
            if checked.elapsed() >= SOURCE_CHECK_INTERVAL {
                vm::check_sources();
                checked = Instant::now();
            }
            if let Some(live) = &self.current.principal.liveness {
                if stall.stalled(live, self.engine_still()) {
                    let waits = stall_watch::describe(&self.current.vm);
                    // Still, with no task waiting and no promise pending: only a timer of a
                    // cancelled task was left, which nothing waits for. The run is over.
                    if waits.is_empty() {
                        break;
                    }
                    return self.end_stalled(waits);
                }
            }
        }
        if self.life.interrupt.requested() {
            return Err(Error::Interrupted {
                entry: "run_until_idle",
                domain: self.name.clone(),
            });
        }
        self.report_unobserved_failures();
        match self.reporting.first_failure() {
            Some(text) => Err(Error::Script(text)),
            None => Ok(()),
        }
    }

    /// The engine thread's part of a stall verdict: nothing ready in the engine VM, nothing in
    /// its mailbox, no registered job live and no `@skein/worker` thread alive.
    pub(super) fn engine_still(&self) -> bool {
        !self.current.vm.has_ready()
            && self.current.rx.is_empty()
            && !self.current.registry.has_work()
            && self.current.actors.live().get() == 0
    }

    /// Ends a stalled `run_until_idle`: a failure already seen comes first, as it would have
    /// had the run ended; else [`Error::Stalled`] naming what the engine VM's tasks wait on.
    #[cold]
    pub(super) fn end_stalled(&self, waits: Vec<String>) -> Result<()> {
        self.report_unobserved_failures();
        if let Some(text) = self.reporting.first_failure() {
            return Err(Error::Script(text));
        }
        Err(Error::Stalled { waits })
    }
}
