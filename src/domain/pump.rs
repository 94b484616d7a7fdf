//! Pumping the domain on its engine thread, each part doing its share: one round of
//! [`ScriptDomain::pump`](crate::ScriptDomain::pump) (never blocks), the blocking round the
//! load, `eval` and [`ScriptDomain::run_until_idle`](crate::ScriptDomain::run_until_idle) are
//! made of, and the stall verdict that ends a run nothing can wake.
//!
//! The current generation's part ([`GenerationState`]) counts a frame, runs the registered jobs
//! when a round is due to, and, when nothing is ready, decides whether anything is outstanding
//! and waits on its mailbox; the frame driver's part ([`FrameDriver`]) keeps when the
//! registered jobs last ran; [`IdleRun`] is what `run_until_idle` watches between its rounds.
//!
//! The invariants: every round counts one frame and wakes the frame waits it ends; a round
//! that waits is bounded by the next timer, the next time the registered jobs are due, one
//! frame interval while promises are pending or tasks wait on frames, and the caller's
//! deadline; a round answers idle only when no task, promise, timer or live registered job is
//! left; the registered jobs run at most once per [`FRAME_INTERVAL`] in these rounds.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::domain::frame::driver::FrameDriver;
use crate::domain::frame::engine_services::EngineServices;
use crate::domain::generation::GenerationState;
use crate::domain::interrupt::InterruptTarget;
use crate::domain::stall_watch;
use crate::executor::wake_queue::Waited;
use crate::jobs::PhaseHost;
use crate::shared;
use crate::vm;

/// The longest `run_until_idle` waits between two frames while work is in flight, so tasks
/// waiting on frames (in the engine VM or on workers) see frames pass.
pub(super) const FRAME_INTERVAL: Duration = Duration::from_millis(16);

/// How often `run_until_idle` looks for edited module sources while a script keeps it busy.
const SOURCE_CHECK_INTERVAL: Duration = Duration::from_millis(250);

/// What one [`pump`](crate::ScriptDomain::pump) did.
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

/// The services' counts a [`PumpReport`] is the difference of: settled, forwarded, applied.
pub(super) struct PumpCounts(u64, u64, u64);

impl PumpCounts {
    /// The counts now.
    pub(super) fn of(services: &EngineServices) -> PumpCounts {
        PumpCounts(
            services.settled.get(),
            services.forwarded.get(),
            services.applied.get(),
        )
    }

    /// What a pump that began at these counts did, now that it `resumed` tasks and `handled`
    /// (or not) something from the mailbox or the engine-event log.
    pub(super) fn report(
        self,
        services: &EngineServices,
        resumed: u64,
        handled: bool,
    ) -> PumpReport {
        // `forwarded` and `applied` restart at each frame: a service the pump ran may have
        // advanced the domain's frame (it is no scheduler entry), so the differences saturate.
        PumpReport {
            settled: services.settled.get().saturating_sub(self.0),
            answered: services.forwarded.get().saturating_sub(self.1),
            applied: services.applied.get().saturating_sub(self.2),
            resumed,
            handled,
        }
    }
}

/// What a blocking round that found nothing ready did next.
pub(super) enum Outstanding {
    /// Nothing is outstanding: no task, no pending promise, no timer, no live registered job
    /// (when the round runs them).
    Nothing,
    /// Something is; the round did not wait, or its wait timed out.
    Pending,
    /// The round waited and something reached the mailbox: the caller drains it.
    Posted,
}

impl GenerationState {
    /// Counts one more frame and wakes the frame waits it ends; answers whether it woke any.
    pub(super) fn count_frame(&self) -> bool {
        let frame = self.principal.frames.fetch_add(1, Ordering::AcqRel) + 1;
        self.vm.wake_frames(frame)
    }

    /// With `jobs`, when registered jobs are live: runs them as a frame does if they are due
    /// ([`FRAME_INTERVAL`] after they last ran), with `host` serving their waits. Answers when
    /// they are due (`None` without `jobs` or live jobs) and whether they ran.
    pub(super) fn run_jobs_due(
        &self,
        jobs: bool,
        frames: &FrameDriver,
        host: &dyn PhaseHost,
    ) -> (Option<Instant>, bool) {
        let live_jobs = jobs && self.registry.has_work();
        let jobs_due = live_jobs.then(|| frames.jobs_due());
        let ran_jobs = match jobs_due {
            Some(due) if due <= Instant::now() => {
                frames.jobs_ran.set(Some(Instant::now()));
                self.registry.run(&self.vm, None, host);
                true
            }
            _ => false,
        };
        (jobs_due, ran_jobs)
    }

    /// The rest of a round that found nothing ready: answers whether anything is outstanding
    /// and, when `block`, waits for the mailbox, the next timer or `jobs_due`, never past
    /// `until` when it is given.
    pub(super) fn wait_for_work(
        &self,
        block: bool,
        jobs_due: Option<Instant>,
        until: Option<Instant>,
    ) -> Outstanding {
        // A pop parked by a task that has since ended would otherwise count as pending forever.
        shared::sweep_parked_pops(&self.vm.lua);
        let pending = self.vm.core.promises.borrow().pending();
        let next = [self.vm.next_wake(), jobs_due].into_iter().flatten().min();
        let frame_waits = self.vm.has_frame_waits();
        if pending == 0 && next.is_none() && !frame_waits {
            return Outstanding::Nothing;
        }
        if !block {
            return Outstanding::Pending;
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
        let waited = self.rx.wait_until(waited_from.checked_add(wait));
        // The wait was on the wall clock: on frame time, the timer it waited for is due now.
        self.vm.add_waited(waited_from);
        if waited != Waited::TimedOut {
            Outstanding::Posted
        } else {
            Outstanding::Pending
        }
    }

    /// The engine thread's part of a stall verdict: nothing ready in the engine VM, nothing in
    /// its mailbox, no registered job live and no `@skein/worker` thread alive.
    pub(super) fn engine_still(&self) -> bool {
        !self.vm.has_ready()
            && self.rx.is_empty()
            && !self.registry.has_work()
            && self.actors.live().get() == 0
    }
}

impl FrameDriver {
    /// When `run_until_idle`'s rounds run the registered jobs next: [`FRAME_INTERVAL`] after
    /// they last ran, or now when they never did.
    fn jobs_due(&self) -> Instant {
        match self.jobs_ran.get() {
            Some(at) => at + FRAME_INTERVAL,
            None => Instant::now(),
        }
    }
}

/// What a round of `run_until_idle` leads to.
pub(super) enum Next {
    /// Another round.
    Round,
    /// The run is over (interrupted, or only a timer nothing waits for is left).
    Over,
    /// The run stalled: what the engine VM's tasks wait on.
    Stalled(Vec<String>),
}

/// What `run_until_idle` watches between its rounds: when it last looked for edited sources,
/// and where its stall check stands.
pub(super) struct IdleRun {
    checked: Instant,
    stall: stall_watch::StallWatch,
}

impl IdleRun {
    /// A run starting now: looks for edited sources first.
    pub(super) fn start() -> IdleRun {
        vm::check_sources();
        IdleRun {
            checked: Instant::now(),
            stall: stall_watch::StallWatch::default(),
        }
    }

    /// The bound of the next round: with a stall check, a round never waits long, so the
    /// check runs while the engine VM waits on a far timer alone.
    pub(super) fn round(current: &GenerationState) -> Option<Instant> {
        current
            .principal
            .liveness
            .as_ref()
            .map(|_| Instant::now() + stall_watch::STALL_ROUND)
    }

    /// After a round that left work outstanding: stops at an interrupt, looks for edited
    /// sources now and then, and takes the stall check's next look.
    pub(super) fn after_round(
        &mut self,
        current: &GenerationState,
        interrupt: &InterruptTarget,
    ) -> Next {
        if interrupt.requested() {
            return Next::Over;
        }
        // A script can run for minutes without returning to the host: look for edited
        // sources now and then, so an edit still reaches its next dispatch.
        if self.checked.elapsed() >= SOURCE_CHECK_INTERVAL {
            vm::check_sources();
            self.checked = Instant::now();
        }
        if let Some(live) = &current.principal.liveness {
            if self.stall.stalled(live, current.engine_still()) {
                let waits = stall_watch::describe(&current.vm);
                // Still, with no task waiting and no promise pending: only a timer of a
                // cancelled task was left, which nothing waits for. The run is over.
                if waits.is_empty() {
                    return Next::Over;
                }
                return Next::Stalled(waits);
            }
        }
        Next::Round
    }
}
