//! The domain's frame: what runs on the engine thread once per frame, and the parts that decide
//! it. [`ScriptDomain::frame`] and the registered jobs' phases are here; the host's contexts
//! and fixed step (`context.rs`), the phase handlers scripts bind and the scheduler that runs
//! them (`phases.rs`), the engine services a frame answers (`engine_services.rs`), the state a
//! domain keeps from frame to frame (`driver.rs`) and the labels of handler calls
//! (`handler_label.rs`) are its files.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::domain::{FrameReport, Report, ReportKind, ScriptDomain};
use crate::error::{Error, Result};
use crate::executor::wake_queue::Waited;
use crate::jobs::{JobInfo, OutcomeSlot, PhaseHost};
use crate::principal::diagnostic::{Attribution, Diagnostic, DiagnosticKind, Severity};
use crate::principal::Phase;
use crate::value::Message;
use crate::vm;

/// How many more drains a frame makes after one that answered forwarded queries, at most: 16.
pub(crate) const FOLLOW_UP_DRAINS: u32 = 16;

/// The longest a frame waits for the follow-ups of the forwarded queries it answered, in all:
/// 2 ms. A frame that answered no query, or whose engine VM has no task waiting on pool work,
/// never waits.
pub(crate) const FOLLOW_UP_WAIT: Duration = Duration::from_millis(2);

/// The longest a wave of registered jobs waits for the pool items it started before the next
/// wave starts: 100 ms, or the domain's run deadline when that is shorter. An item that waits
/// across frames (`task.waitFrames`, a promise the engine settles) cannot settle within the
/// frame; this is what it may cost the frame, once.
pub(crate) const WAVE_WAIT: Duration = Duration::from_millis(100);

/// While a wave of registered jobs waits for its pool items, how long the engine thread parks
/// on one item before it looks at its mailbox again (an item may be waiting for the engine to
/// answer a query it forwarded): 200 µs.
const WAVE_POLL: Duration = Duration::from_micros(200);

pub(crate) mod context;
pub(crate) mod driver;
pub(crate) mod engine_services;
pub(crate) mod handler_label;
pub(crate) mod join;
pub(crate) mod phases;

impl ScriptDomain {
    /// One engine frame: drains the mailbox (applying recorded commands, answering forwarded
    /// queries, settling promises), runs the early deferred drain, moves the frame counter on
    /// (waking the tasks whose `task.waitFrames` it reached, here and on workers), runs the
    /// registered jobs phase by phase, then the late deferred drain. A deferred drain resumes
    /// the timers due, the batch of `task.defer`red work and the tasks that are ready, each
    /// once; what they defer goes to the next batch, the next drain's. `dt` is what the host
    /// says the frame covers; it only adds up in [`FrameReport::time`]: task timers follow the
    /// wall clock, or, once [`advance`](Self::advance) has put the engine VM on frame time,
    /// move with `advance` alone.
    ///
    /// A frame blocks in two cases only. Between two waves of a registered jobs' phase (jobs
    /// ordered by `after`, `before`, `reads` and `writes`), it waits for the pool items the
    /// earlier wave started in this frame, serving the mailbox meanwhile, at most
    /// [`FrameReport::WAVE_WAIT`] (or the domain's run deadline when that is shorter); after
    /// a phase's last wave it does not wait. And a frame that answered a forwarded query while
    /// a task of the engine VM waits on pool work waits for what the jobs that asked do next
    /// (another query, or their completion and the commands they recorded) and serves it in
    /// the same frame, until a drain brings no new query, at most
    /// [`FrameReport::FOLLOW_UP_DRAINS`] more drains and [`FrameReport::FOLLOW_UP_WAIT`] in
    /// all, parked on the mailbox: so a job an engine task awaits that makes a query and then
    /// records commands settles in the frame it returned in. A job only the host awaits (its
    /// [`Promise`](crate::Promise)) is not waited for.
    ///
    /// ```
    /// use std::time::Duration;
    /// use skein::{DomainSpec, Message, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let domain = ScriptDomain::new(&pool, DomainSpec::new("main"))?;
    /// domain.exec("task.waitFrames(2) done = true")?;
    /// let first = domain.frame(Duration::from_millis(16));
    /// assert_eq!(domain.eval("return done")?, Message::Nil);
    /// let later = domain.frame(Duration::from_millis(16));
    /// assert!(later.frame > first.frame);
    /// assert_eq!(later.time, Duration::from_millis(32));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// A frame moves a ready domain to [`Running`](crate::lifecycle::DomainState::Running). A stopped domain's
    /// frame does nothing; so does a frame asked for while a phase, advance or frame of the
    /// same domain runs (a handler reaching back through a host service): that is recorded as
    /// a [`Report`] naming [`Error::Reentrant`], and the report answered counts nothing.
    pub fn frame(&self, dt: Duration) -> FrameReport {
        match self.enter("frame") {
            Ok(_entered) => self.run_frame(dt, true),
            Err(e) => {
                if matches!(e, Error::Reentrant(_)) {
                    self.reporting
                        .keep(Report::new(ReportKind::Service, "frame", e.to_string()));
                }
                FrameReport {
                    frame: self.frames(),
                    forwarded_calls: 0,
                    commands_applied: 0,
                    time: self.frames.frame_time.get(),
                    reports: Vec::new(),
                }
            }
        }
    }

    /// One frame, inside a scheduler entry. `early_drain`: the frame runs its early deferred
    /// drain itself and counts its forwarded queries and applied commands from its own start
    /// (a plain [`frame`](Self::frame)); an [`advance`](Self::advance) ran the drain before its
    /// phases and counts from its start.
    pub(crate) fn run_frame(&self, dt: Duration, early_drain: bool) -> FrameReport {
        vm::check_sources();
        if early_drain {
            // An advance counts from its own start, its joins included.
            self.frames.services.forwarded.set(0);
            self.frames.services.applied.set(0);
        }
        self.frames
            .frame_time
            .set(self.frames.frame_time.get() + dt);
        let mark = self.reporting.mark();
        // A generation's first frame starts it up (an advance did already).
        if !self.current.started_up.replace(true) {
            self.broadcast_reporting(Phase::Startup);
        }
        let frame = self.round(early_drain);
        FrameReport {
            frame,
            forwarded_calls: self.frames.services.forwarded.get(),
            commands_applied: self.frames.services.applied.get(),
            time: self.frames.frame_time.get(),
            reports: self.reporting.since(mark),
        }
    }

    /// The frame counter: how many frames the domain has run ([`frame`](Self::frame), and each
    /// round of [`pump`](Self::pump), [`eval`](Self::eval) and
    /// [`run_until_idle`](Self::run_until_idle)).
    pub fn frames(&self) -> u64 {
        self.current.principal.frames.load(Ordering::Acquire)
    }

    /// One frame's work: drain (and the follow-ups of the queries it answered), the early
    /// deferred drain (unless `early_drain` is false: an advance ran it before its phases),
    /// count the frame and wake its frame waits, the registered jobs phase by phase, the late
    /// deferred drain (which resumes the frame waits woken). Answers the frame.
    pub(crate) fn round(&self, early_drain: bool) -> u64 {
        let answered = self.frames.services.forwarded.get();
        self.drain();
        self.drain_follow_ups(answered);
        if early_drain {
            self.current.vm.step();
        }
        let frame = self.current.principal.frames.fetch_add(1, Ordering::AcqRel) + 1;
        self.current.vm.wake_frames(frame);
        self.current.registry.run(&self.current.vm, None, self);
        self.current.vm.step();
        frame
    }

    /// After a drain that answered forwarded queries, waits for what the jobs that asked do
    /// next and drains it: another query is answered in this frame too, and the completion of
    /// a job that went on to record commands and return is applied in this frame, so a job
    /// that queries and then records settles in the frame it returned in. It waits only while
    /// a task of the engine VM waits on pool work (a follow-up of work nobody here awaits, a
    /// host's [`Promise`](crate::Promise) or a registered job's item, serves no task of this
    /// frame), parked on the mailbox. It stops at the first drain that answers no new query,
    /// after [`FOLLOW_UP_DRAINS`] drains, or when [`FOLLOW_UP_WAIT`] has passed since it
    /// began, whichever comes first. `answered`: the count of forwarded queries before the
    /// frame's first drain.
    fn drain_follow_ups(&self, answered: u64) {
        let mut seen = answered;
        let mut until = None;
        for _ in 0..FOLLOW_UP_DRAINS {
            let now = self.frames.services.forwarded.get();
            if now == seen || !self.current.vm.waits_on_pool() {
                return;
            }
            seen = now;
            let until = *until.get_or_insert_with(|| Instant::now() + FOLLOW_UP_WAIT);
            if self.current.rx.park_until(Some(until)) == Waited::TimedOut {
                return;
            }
            self.drain_mailbox();
        }
    }

    /// Runs the jobs of one phase now, and only them: each applies a result that landed, then
    /// starts its next run or item, as in [`frame`](Self::frame). The mailbox is drained first
    /// (so results and their commands are in) and ready tasks run after; the frame counter does
    /// not move. Answers false, doing nothing else, for a phase no job has registered in.
    ///
    /// ```
    /// use skein::{DomainSpec, Message, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let domain = ScriptDomain::new(&pool, DomainSpec::new("main"))?;
    /// domain.eval(r#"
    ///     n = 0
    ///     jobs.register({ phase = "physics", executor = { kind = "luau", run = function() n += 1 end } })
    /// "#)?;
    /// assert!(domain.run_job_phase("physics"));
    /// assert!(domain.run_job_phase("physics"));
    /// assert!(!domain.run_job_phase("render"));
    /// assert_eq!(domain.eval("return n")?, Message::Number(2.0));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// Registered jobs' phases are their own names, apart from the scheduler's [`Phase`](crate::Phase)s:
    /// [`run_phase`](Self::run_phase) runs context handlers, this runs jobs.
    pub fn run_job_phase(&self, name: &str) -> bool {
        vm::check_sources();
        self.drain();
        let known = self
            .current
            .registry
            .run(&self.current.vm, Some(name), self);
        self.current.vm.step();
        known
    }

    /// Registers a kernel: a native function that `kernel` jobs name (`executor = { kind =
    /// "kernel", kernel = name }`). Each frame such a job runs `f` on a pool worker, over a
    /// copy of its `input()` (or nil), with no Luau VM involved; the result goes to the job's
    /// `apply` on the engine thread. An `Err` or a panic errors the job (the panic is contained
    /// and the worker goes on serving).
    ///
    /// ```
    /// use std::time::Duration;
    /// use skein::{DomainSpec, Message, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let domain = ScriptDomain::new(&pool, DomainSpec::new("main"))?;
    /// domain.register_kernel("double", |m| match m {
    ///     Message::Number(n) => Ok(Message::Number(n * 2.0)),
    ///     other => Err(format!("expected a number, got {other:?}")),
    /// })?;
    /// domain.eval(r#"
    ///     jobs.register({ phase = "main", executor = { kind = "kernel", kernel = "double",
    ///         input = function() return 21 end, apply = function(r) answer = r end } })
    /// "#)?;
    /// while domain.eval("return answer")? == Message::Nil {
    ///     domain.frame(Duration::from_millis(1));
    /// }
    /// assert_eq!(domain.eval("return answer")?, Message::Number(42.0));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Name`] ([`NameRefusal::KernelName`](crate::refusal::NameRefusal::KernelName) or
    /// [`NameRefusal::KernelTaken`](crate::refusal::NameRefusal::KernelTaken)) when
    /// the name is not 1 to 256 bytes or is registered already.
    pub fn register_kernel<F>(&self, name: &str, f: F) -> Result<()>
    where
        F: Fn(Message) -> std::result::Result<Message, String> + Send + Sync + 'static,
    {
        self.current.registry.register_kernel(name, Arc::new(f))
    }

    /// Snapshots of the jobs registered on this domain, in registration order.
    pub fn jobs(&self) -> Vec<JobInfo> {
        self.current.registry.list(None)
    }
}

/// The frame's side of running registered jobs: a wave waits for its pool items here, and
/// unordered writes become diagnostics.
impl PhaseHost for ScriptDomain {
    /// Waits until every slot has settled, draining the mailbox whenever something reaches it
    /// (a forwarded query, the commands an item recorded before it settles), at most
    /// [`WAVE_WAIT`] or the domain's run deadline, whichever is shorter.
    fn settle(&self, slots: &[Arc<OutcomeSlot>]) -> Duration {
        let started = Instant::now();
        let until = started + WAVE_WAIT.min(self.current.principal.max_deadline);
        for slot in slots {
            while slot.is_pending() {
                // The bound first: a steady stream of messages must not hold the frame past it.
                let now = Instant::now();
                if now >= until {
                    return now - started;
                }
                if !self.current.rx.is_empty() {
                    self.drain_mailbox();
                    continue;
                }
                slot.wait_settled_until(until.min(now + WAVE_POLL));
            }
        }
        started.elapsed()
    }

    fn unordered_write(&self, phase: &str, first: &str, second: &str, name: &str) {
        let attribution = Attribution {
            domain_name: self.name.clone(),
            domain: self.id(),
            generation: self.generation(),
            context: None,
            actor: None,
        };
        let message = format!(
            "jobs '{first}' and '{second}' of phase '{phase}' both write '{name}' and nothing \
             orders them: they run in registration order; declare after or before to choose"
        );
        let diagnostic = Diagnostic::new(DiagnosticKind::UnorderedWrites, attribution, message);
        self.diagnose(Severity::Warning, &diagnostic);
    }
}
