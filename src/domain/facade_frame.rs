//! [`ScriptDomain`]'s face for frames and phases: `frame`, `advance`, `run_phase`,
//! `run_frames`, `stop`, registered jobs' phases, kernels and engine services, and the
//! scheduler entry the other entry points share.
//!
//! Each method here coordinates the domain's parts: the frame's steps, the advance's phases and
//! the handler calls are the [`FrameDriver`]'s (`frame/`), the handlers and their order the
//! generation's [`Bindings`](super::frame::bindings::Bindings), the join of calls waiting on the pool
//! [`PhaseJoin`]'s (`frame/join.rs`), the services and their registration
//! [`EngineServices`]'s (`frame/engine_services.rs`), the frame loop's steps `run_frames.rs`'s.
//! What a method adds is the order the parts are called in, the drains of the mailbox between
//! them (`events/`), and the moves of the domain's state (`stop`, `enter`).
//!
//! [`FrameDriver`]: super::frame::driver::FrameDriver
//! [`EngineServices`]: super::frame::engine_services::EngineServices

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::frame::engine_services::Service;
use super::frame::join::{Joining, PhaseJoin};
use super::frame::phases::{self, PhaseCall};
use super::frame::{self, context::ContextSpec, driver::Entered};
use super::{run_frames, stall_watch};
use crate::domain::{
    AdvanceReport, DomainState, FrameReport, PhaseReport, Report, ScriptDomain, ServiceError,
};
use crate::error::{Error, Result};
use crate::jobs::{JobInfo, OutcomeSlot, PhaseHost};
use crate::principal::capability::CapabilityId;
use crate::principal::diagnostic::Severity;
use crate::principal::profile::ProfileKind;
use crate::principal::Phase;
use crate::value::{FromMessage, IntoMessage, Message};
use crate::vm;

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
            Err(e) => self.frames.refused_frame(e, self.frames(), &self.reporting),
        }
    }

    /// One frame, inside a scheduler entry. `early_drain`: the frame runs its early deferred
    /// drain itself and counts its forwarded queries and applied commands from its own start
    /// (a plain [`frame`](Self::frame)); an [`advance`](Self::advance) ran the drain before its
    /// phases and counts from its start.
    pub(crate) fn run_frame(&self, dt: Duration, early_drain: bool) -> FrameReport {
        vm::check_sources();
        self.frames.begin_frame(dt, early_drain);
        let mark = self.reporting.mark();
        // A generation's first frame starts it up (an advance did already).
        if !self.current.started_up.replace(true) {
            self.broadcast_reporting(Phase::Startup);
        }
        let frame = self.round(early_drain);
        self.frames.frame_report(frame, self.reporting.since(mark))
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
        let drain_mailbox = || self.drain_mailbox();
        self.frames
            .drain_follow_ups(&self.current, answered, drain_mailbox);
        let frame = frame::count_frame(&self.current, early_drain);
        self.current.registry.run(&self.current.vm, None, self);
        self.current.vm.step();
        frame
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
    /// Registered jobs' phases are their own names, apart from the scheduler's [`Phase`]s:
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

    /// Where the domain is in its life (see [`DomainState`] for the transitions).
    pub fn state(&self) -> DomainState {
        self.life.state.get()
    }

    /// The contexts the host declared, in declaration order.
    pub fn contexts(&self) -> &[ContextSpec] {
        self.current.bindings.contexts()
    }

    /// Runs every handler bound to `phase` now, each called with a copy of `args`, and answers
    /// what happened.
    ///
    /// Handlers run by their context's priority (higher first), contexts of equal priority in
    /// declaration order, and one context's handlers in the order they were bound. Each call
    /// is a task of the engine VM held to its context's budget per run, and timed. A handler
    /// that raises, or runs past its budget, becomes a [`Diagnostic`] in the report and the
    /// next handler runs. A handler that yields (`task.wait`, an `await`) goes on as a task;
    /// a failure after that is a [`Report`] of the domain.
    ///
    /// ```
    /// use skein::{ContextSpec, DomainSpec, Message, Phase, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let spec = DomainSpec::new("game")
    ///     .context(ContextSpec::new("ui").phases([Phase::Input]))?
    ///     .context(ContextSpec::new("world").phases([Phase::Input]).priority(5))?;
    /// let domain = ScriptDomain::new(&pool, spec)?;
    /// domain.exec(r#"
    ///     local context = require("@skein/context")
    ///     seen = {}
    ///     context.bind("ui", { input = function(key) table.insert(seen, "ui " .. key) end })
    ///     context.bind("world", { input = function(key) table.insert(seen, "world " .. key) end })
    /// "#)?;
    /// let report = domain.run_phase(Phase::Input, &[Message::String("w".into())])?;
    /// assert_eq!(report.calls, 2);
    /// assert!(report.errors.is_empty());
    /// // The higher priority ran first.
    /// assert_eq!(domain.eval("return table.concat(seen, ', ')")?, Message::String("world w, ui w".into()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Reentrant`] when called while a phase, advance or frame of this domain runs
    /// (from a handler, through a host service); [`Error::Stopped`] once the domain is stopping or
    /// stopped.
    ///
    /// [`Diagnostic`]: crate::diagnostic::Diagnostic
    pub fn run_phase(&self, phase: Phase, args: &[Message]) -> Result<PhaseReport> {
        let _entered = self.enter("run_phase")?;
        if phase == Phase::Startup {
            self.current.started_up.set(true);
        }
        let until = Instant::now().checked_add(self.frames.frame_budget);
        Ok(self.broadcast(phase, args, until))
    }

    /// Moves the domain's time on by `delta`, as one engine frame: the early deferred drain
    /// (timers due, `task.defer`red work, ready tasks); the `fixedUpdate` steps the accumulator
    /// owes (each handler receives the step in seconds), at most the catch-up limit of the
    /// domain's [`FixedStep`](crate::frame::FixedStep), dropping and counting the rest; then `update`
    /// and `lateUpdate` (handlers receive `delta` in seconds); then one drain of the event
    /// queue ([`drain_events`](Self::drain_events), answered in [`AdvanceReport::events`]), so
    /// an event emitted during `update` is delivered in the same advance; then the rest of a
    /// [`frame`](Self::frame): the mailbox drain, frame waits, registered jobs and the late
    /// deferred drain.
    ///
    /// ```
    /// use std::time::Duration;
    /// use skein::frame::FixedStep;
    /// use skein::{ContextSpec, DomainSpec, Message, Phase, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let spec = DomainSpec::new("game")
    ///     .fixed_step(FixedStep { step: Duration::from_millis(10), max_catch_up: 4 })
    ///     .context(ContextSpec::new("sim").phases([Phase::FixedUpdate, Phase::Update]))?;
    /// let domain = ScriptDomain::new(&pool, spec)?;
    /// domain.exec(r#"
    ///     steps, updates = 0, 0
    ///     require("@skein/context").bind("sim", {
    ///         fixedUpdate = function(dt) steps += 1 end,
    ///         update = function(dt) updates += 1 end,
    ///     })
    /// "#)?;
    /// let report = domain.advance(Duration::from_millis(25))?;
    /// assert_eq!((report.fixed_steps, report.dropped_steps), (2, 0));
    /// // 5 ms were left over: 65 more make 7 steps owed, 4 run and 3 are dropped.
    /// let report = domain.advance(Duration::from_millis(65))?;
    /// assert_eq!((report.fixed_steps, report.dropped_steps), (4, 3));
    /// assert_eq!(domain.eval("return steps")?, Message::Number(6.0));
    /// assert_eq!(domain.eval("return updates")?, Message::Number(2.0));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// The first `advance` puts the engine VM's timers (`task.wait`, `task.delay`, the
    /// timeouts of `events.wait` and `engine.wait`) on frame time, and each moves that clock on
    /// by `delta`: a long `delta` fires every timer it passed, in wake order, at the frame's
    /// step; a `delta` of zero fires nothing new (docs/embedding.md, "Driving a domain").
    ///
    /// # Errors
    /// As [`run_phase`](Self::run_phase).
    pub fn advance(&self, delta: Duration) -> Result<AdvanceReport> {
        self.advance_within(delta, self.frames.frame_budget)
    }

    /// [`advance`](Self::advance) with its own frame budget: the longest this advance waits,
    /// over all its phases, for the pool work its handlers await (`Duration::ZERO`: it
    /// resumes no handler before that work's own frame drains it; a budget past
    /// [`MAX_DEADLINE`](crate::job::JobOptions::MAX_DEADLINE), 60 s, waits 60 s).
    ///
    /// ```
    /// use std::time::Duration;
    /// use skein::{ContextSpec, DomainSpec, Phase, Pool, ScriptDomain};
    ///
    /// let dir = tempfile::tempdir()?;
    /// std::fs::write(dir.path().join("slow.luau"), "return { run = function() local t = os.clock() while os.clock() - t < 0.2 do end end }")?;
    /// let pool = Pool::new(1);
    /// let spec = DomainSpec::new("game")
    ///     .plan(skein::Plan::new().root(dir.path()))
    ///     .context(ContextSpec::new("main").phases([Phase::Update]))?;
    /// let domain = ScriptDomain::new(&pool, spec)?;
    /// domain.exec(r#"require("@skein/context").bind("main", {
    ///     update = function() jobs.dispatch("./slow", "run"):await() end })"#)?;
    /// // A frame that gives the pool 5 ms goes on without the 200 ms job, and says so.
    /// let report = domain.advance_within(Duration::from_millis(16), Duration::from_millis(5))?;
    /// let waiting: Vec<_> = report.still_waiting().collect();
    /// assert_eq!(waiting.len(), 1);
    /// assert_eq!(waiting[0].source, "context 'main' update handler");
    /// assert!(waiting[0].waited >= Duration::from_millis(5));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// As [`run_phase`](Self::run_phase).
    pub fn advance_within(&self, delta: Duration, budget: Duration) -> Result<AdvanceReport> {
        let _entered = self.enter("advance")?;
        let (mut advance, until) = self.frames.begin_advance(&self.current.vm, delta, budget);
        let mark = self.reporting.mark();
        let broadcast = |phase, args: &[Message]| self.broadcast(phase, args, until);
        self.frames
            .run_phases(&mut advance, &self.current, broadcast);
        // After the phases, so an event emitted in one is delivered in this advance.
        let events = self.run_event_drain();
        // The frame ends with the late deferred drain.
        let frame = self.run_frame(delta, false);
        Ok(advance.report(events, frame, &self.reporting, mark))
    }

    /// Ends the domain: runs the `shutdown` phase (its failures become
    /// [`Report`]s), drops every bound handler, then ends the generation as a
    /// restart does (queued pool items are refused unrun naming `domain '<name>' stopped`, its
    /// running pool jobs are interrupted at their next interrupt check, so a host
    /// [`Promise`](crate::Promise) of one settles as [`Error::Cancelled`]
    /// within microseconds even for `while true do end`; the shared store and key bindings
    /// end). The domain is then [`Stopped`](DomainState::Stopped):
    /// `run_phase`, `advance` and `frame` do nothing more. Events still queued (those the
    /// shutdown handlers emitted included) are dropped undelivered and counted in
    /// [`DomainStats::events_dropped_at_stop`](crate::stats::DomainStats::events_dropped_at_stop).
    /// Stopping twice does nothing; dropping a domain stops it.
    ///
    /// ```
    /// use skein::lifecycle::DomainState;
    /// use skein::{ContextSpec, DomainSpec, Phase, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let spec = DomainSpec::new("game").context(ContextSpec::new("main").phases([Phase::Shutdown]))?;
    /// let mut domain = ScriptDomain::new(&pool, spec)?;
    /// domain.exec(r#"require("@skein/context").bind("main", { shutdown = function() error("bye") end })"#)?;
    /// domain.stop();
    /// assert_eq!(domain.state(), DomainState::Stopped);
    /// let reports = domain.take_reports();
    /// assert!(reports[0].message.contains("bye"), "{reports:?}");
    /// assert!(domain.run_phase(Phase::Shutdown, &[]).is_err());
    /// assert_eq!(domain.stats().events_dropped_at_stop, 0, "nothing was queued");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stop(&mut self) {
        if matches!(self.life.state.get(), DomainState::Stopped) {
            return;
        }
        let started = Instant::now();
        self.life.state.set(DomainState::Stopping);
        self.shut_down();
        // Nothing drains a stopped domain: posts to it are refused from here on, and what is
        // queued (the shutdown handlers' emits included) is dropped and counted.
        let dropped = self.event_handlers.queue().stop();
        self.reporting.counters.dropped_at_stop(dropped);
        self.end_generation(&format!("domain '{}' stopped", self.name), false);
        // Whatever a host service takes for the domain from now on is released at once.
        for failure in self.life.owned.close() {
            self.report_release_failure(failure);
        }
        self.life.state.set(DomainState::Stopped);
        self.profiled(ProfileKind::DomainStopped, None, None, started);
    }

    /// Runs the generation's `shutdown` handlers (their failures become reports, labelled by
    /// context) and drops every bound handler: what a stop and a restart both do first.
    pub(crate) fn shut_down(&self) {
        self.broadcast_reporting(Phase::Shutdown);
        self.current.bindings.clear();
    }

    /// Runs every handler of `phase` with no arguments; each failure becomes a
    /// [`Report`] labelled by its context, as nobody reads a phase report here.
    pub(crate) fn broadcast_reporting(&self, phase: Phase) {
        let report = self.broadcast(phase, &[], None);
        for error in report.errors {
            let context = error.attribution.context.as_deref();
            self.reporting
                .keep(phases::phase_failure(phase, context, error.message));
        }
    }

    /// Marks the start of a scheduler entry: refuses a stopped domain and a nested entry, and
    /// moves a loaded domain to `Running`.
    pub(crate) fn enter(&self, entry: &'static str) -> Result<Entered<'_>> {
        let entered = self
            .frames
            .enter(entry, self.life.state.get(), &self.name)?;
        self.mark_running();
        Ok(entered)
    }

    /// The first phase or frame moves a ready (or still loading) domain to `Running`.
    pub(crate) fn mark_running(&self) {
        if matches!(
            self.life.state.get(),
            DomainState::Ready | DomainState::Loading
        ) {
            self.life.state.set(DomainState::Running);
            self.profiled(ProfileKind::DomainStarted, None, None, Instant::now());
        }
    }

    /// Calls every handler of `phase` in run order, then, with `until`, joins the calls that
    /// wait on pool work until it settles or `until` passes (`join.rs`).
    fn broadcast(&self, phase: Phase, args: &[Message], until: Option<Instant>) -> PhaseReport {
        let started = Instant::now();
        let _joining = until.map(|_| Joining::begin(&self.current.principal.joining));
        let mut join = PhaseJoin::default();
        let mut report = self.broadcast_in(phase, None, args, None, Some(&mut join));
        if let Some(until) = until {
            let (current, interrupt) = (&self.current, &self.life.interrupt);
            let drain_mailbox = || self.drain_mailbox();
            join.wait_into(
                &mut report,
                started,
                until,
                current,
                interrupt,
                drain_mailbox,
            );
        }
        report
    }

    /// Calls the handlers of `phase` in run order: every context's, or only those of the
    /// context at index `only` (a raw event's target). A handler's queue delay (for the
    /// profile) runs from `queued` (when a raw event was posted), else from the phase's start.
    /// The calls that wait on pool work when they yield go into `join`, when it is given.
    pub(crate) fn broadcast_in(
        &self,
        phase: Phase,
        only: Option<usize>,
        args: &[Message],
        queued: Option<Instant>,
        join: Option<&mut PhaseJoin>,
    ) -> PhaseReport {
        let call = PhaseCall {
            phase,
            only,
            args,
            queued,
            join,
        };
        self.frames
            .run_handlers(&self.current, &self.reporting, &self.name, call)
    }

    /// Registers a query: a function of the host that answers a value, reached from Luau at
    /// the dotted global path `name` (`world.get`). In the engine VM the path calls `f`
    /// directly; in a worker VM it forwards the call to this thread and the calling task waits
    /// for the answer, after every command its job recorded before it has applied.
    ///
    /// `f` takes the call's arguments as any [`FromMessage`] type: a tuple reads them by
    /// position (`|(id, pos): (i64, [f32; 3])|`), `()` ignores them,
    /// [`Args`](crate::message::Args) takes them all, and any other type (a [`Message`] too)
    /// takes the first. Its answer is any [`IntoMessage`] type. An argument that does not
    /// convert is raised to the caller naming it (`args[2]: expected a vector, got a string`);
    /// an `Err` ([`ServiceError`], which `?` makes from a denied capability check, a
    /// conversion, a `String` or a `&str`) is raised naming the service, and so is a panic,
    /// which is contained.
    ///
    /// ```
    /// use skein::{DomainSpec, Message, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let domain = ScriptDomain::new(&pool, DomainSpec::new("main"))?;
    /// domain.register_query("world.scale", |(by, pos): (f64, [f32; 3])| {
    ///     Ok(pos.map(|c| c * by as f32))
    /// })?;
    /// let moved = domain.eval("return world.scale(2, vector.create(1, 2, 3))")?;
    /// assert_eq!(moved, Message::Vector([2.0, 4.0, 6.0]));
    /// let err = domain.eval("return world.scale('x', vector.zero)").unwrap_err().to_string();
    /// assert!(err.contains(
    ///     "engine service 'world.scale' failed: args[1]: expected a number (or an integer within ±2^53), got a string"
    /// ));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Name`] naming the [`NameRefusal`]: when the name is not 1 to 256 bytes of
    /// dotted Luau identifiers, is registered already, or its path is taken in the engine VM (a
    /// global that is not a table, a read-only built-in table, or a value at the path itself).
    ///
    /// [`NameRefusal`]: crate::refusal::NameRefusal
    pub fn register_query<A, R, F>(&self, name: &str, f: F) -> Result<()>
    where
        A: FromMessage,
        R: IntoMessage,
        F: Fn(A) -> std::result::Result<R, ServiceError> + 'static,
    {
        let (lua, principal) = (&self.current.vm.lua, &self.current.principal);
        let service = Service::typed_query(f);
        self.frames.services.register(lua, principal, name, service)
    }

    /// Registers a command: a function of the host that changes host state and answers
    /// nothing, reached from Luau at the dotted global path `name` (`world.set`). In the engine
    /// VM the path calls `f` directly; in a worker VM the call is recorded and returns at once,
    /// and this thread applies the job's commands in the order it recorded them, before the
    /// job's promise settles.
    ///
    /// `f` takes the call's arguments as [`register_query`](Self::register_query)'s does.
    ///
    /// ```
    /// use std::{cell::RefCell, rc::Rc};
    /// use skein::{DomainSpec, Message, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let domain = ScriptDomain::new(&pool, DomainSpec::new("main"))?;
    /// let log = Rc::new(RefCell::new(Vec::new()));
    /// let sink = log.clone();
    /// domain.register_command("log.write", move |(text, weight): (String, f64)| {
    ///     sink.borrow_mut().push((text, weight));
    ///     Ok(())
    /// })?;
    /// domain.eval("log.write('a', 1.5)")?;
    /// assert_eq!(*log.borrow(), vec![("a".to_owned(), 1.5)]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// As [`register_query`](Self::register_query).
    pub fn register_command<A, F>(&self, name: &str, f: F) -> Result<()>
    where
        A: FromMessage,
        F: FnMut(A) -> std::result::Result<(), ServiceError> + 'static,
    {
        let (lua, principal) = (&self.current.vm.lua, &self.current.principal);
        let service = Service::typed_command(f, None);
        self.frames.services.register(lua, principal, name, service)
    }

    /// Registers a command, as [`register_command`](Self::register_command) does, that only a
    /// caller holding `capability` may call. The check is made where the call is made, under
    /// the calling task's authority: in the engine VM before `f` runs, in a worker VM or an
    /// actor before the call is recorded. A denied call raises in the caller, as
    /// `engine service '<name>' failed: capability '<capability>' denied to <who>`, the same
    /// text wherever it was made; it is counted and reported once, and nothing is recorded or
    /// applied.
    ///
    /// A command that checks inside `f` instead
    /// ([`require_capability`](crate::capability::require_capability)) checks only when it is
    /// applied: a job that recorded it has gone on by then, so only the host hears of the
    /// denial.
    ///
    /// ```
    /// use std::{cell::RefCell, rc::Rc};
    /// use skein::capability::CapabilityId;
    /// use skein::{DomainSpec, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let domain = ScriptDomain::new(&pool, DomainSpec::new("mods"))?; // granted nothing
    /// let played = Rc::new(RefCell::new(Vec::new()));
    /// let sink = played.clone();
    /// let audio_play = CapabilityId::new("audio.play")?;
    /// domain.register_command_requiring("audio.play", audio_play, move |clip: String| {
    ///     sink.borrow_mut().push(clip);
    ///     Ok(())
    /// })?;
    /// let err = domain.eval("audio.play('boom')").unwrap_err().to_string();
    /// assert!(err.contains(&format!(
    ///     "engine service 'audio.play' failed: capability 'audio.play' denied to domain 'mods' ({}, generation 1)",
    ///     domain.id()
    /// )));
    /// assert!(played.borrow().is_empty());
    /// assert_eq!(domain.denials(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// As [`register_query`](Self::register_query).
    pub fn register_command_requiring<A, F>(
        &self,
        name: &str,
        capability: CapabilityId,
        f: F,
    ) -> Result<()>
    where
        A: FromMessage,
        F: FnMut(A) -> std::result::Result<(), ServiceError> + 'static,
    {
        let (lua, principal) = (&self.current.vm.lua, &self.current.principal);
        let service = Service::typed_command(f, Some(capability));
        self.frames.services.register(lua, principal, name, service)
    }

    /// Serves a query named `name` to forwarded calls only: nothing is installed in any VM,
    /// so a layer above (resources) reaches it through its own worker-side stub, and a name
    /// that is no Luau path (`@skein/resources.call`) can't meet a host's service. A name
    /// served already is replaced.
    pub(crate) fn serve_query(
        &self,
        name: &str,
        f: impl Fn(Message) -> std::result::Result<Message, String> + 'static,
    ) {
        self.frames
            .services
            .insert(Arc::from(name), Service::Query(Box::new(f)));
    }

    /// Runs the domain as a frame loop: [`advance`](Self::advance)`(step)` once every `step` of
    /// wall time (events drained, fixed steps, `update`, `lateUpdate`, registered jobs, tasks),
    /// serving the mailbox between frames (settled promises resume their tasks at once, not at
    /// the next frame), until nothing can run any more. Timers follow frame time, so a frame
    /// that runs late makes them late too, never fire in a burst.
    ///
    /// The run goes on while any of these is live: a task of the engine VM (a handler call
    /// that yielded is one), a pending promise (pool work), a registered job that is neither
    /// paused nor errored, or an event still queued for its handlers (a `@skein/worker` worker
    /// alone does not count, as for `run_until_idle`). Handlers bound to `fixedUpdate`, `update` or `lateUpdate` run in every frame
    /// the run makes but do not by themselves keep it going: code that runs until it is
    /// interrupted keeps a task or a registered job alive. With
    /// [`DomainSpec::detect_stalls`](crate::DomainSpec::detect_stalls) it also ends when what is
    /// left can never move: every task waits on what nothing can settle or raise (see
    /// [`Error::Stalled`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use skein::{ContextSpec, DomainSpec, Message, Phase, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let spec = DomainSpec::new("game").context(ContextSpec::new("main").phases(Phase::ALL))?;
    /// let domain = ScriptDomain::new(&pool, spec)?;
    /// domain.exec(r#"
    ///     local events = require("@skein/events")
    ///     events.on("scored", function(points) total = points end)
    ///     task.spawn(function()
    ///         task.wait(0.05) -- frame time: the fourth frame of 16 ms
    ///         events.emit("scored", 10)
    ///     end)
    /// "#)?;
    /// // Ends once the event is delivered: nothing is left that could run.
    /// domain.run_frames(Duration::from_millis(16))?;
    /// assert_eq!(domain.eval("return total")?, Message::Number(10.0));
    /// assert!(domain.frames() >= 4);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// The first failure of a script the host started ([`Error::Script`]), as for
    /// `run_until_idle`; [`Error::Stalled`] naming what the tasks wait on;
    /// [`Error::Interrupted`] after an [`InterruptHandle`](crate::InterruptHandle) interrupted
    /// the domain; what [`advance`](Self::advance) refuses (a stopped domain).
    pub fn run_frames(&self, step: Duration) -> Result<()> {
        let step = step.max(Duration::from_micros(100));
        let mut stall = stall_watch::StallWatch::default();
        let mut tick = Instant::now();
        loop {
            if self.life.interrupt.requested() {
                return Err(Error::Interrupted {
                    entry: "run_frames",
                    domain: self.name.clone(),
                });
            }
            vm::check_sources();
            let frame = self.advance(step)?;
            self.keep_handler_failures(&frame);
            tick = (tick + step).max(Instant::now());
            run_frames::serve_until(&self.current, &self.life.interrupt, tick, || self.drain());
            if !run_frames::frames_live(&self.current, &self.event_handlers) {
                break;
            }
            if let Some(live) = &self.current.principal.liveness {
                let still = self.engine_still() && self.pending_events() == 0;
                if stall.stalled(live, still) {
                    let waits = stall_watch::describe(&self.current.vm);
                    if waits.is_empty() {
                        break;
                    }
                    return self.end_stalled(waits);
                }
            }
        }
        self.report_unobserved_failures();
        match self.reporting.first_failure() {
            Some(text) => Err(Error::Script(text)),
            None => Ok(()),
        }
    }

    /// Keeps `report` for the next [`take_reports`](Self::take_reports).
    pub(crate) fn keep_report(&self, report: Report) {
        self.reporting.keep(report);
    }

    /// Keeps the handler failures of a frame as [`Report`]s, for a frame loop that reads no
    /// frame's report (this one, `skein serve`'s): a phase handler's labelled by its context and
    /// phase, an event handler's by the event.
    pub(crate) fn keep_handler_failures(&self, frame: &AdvanceReport) {
        let mut reports = self.reporting.reports().borrow_mut();
        run_frames::keep_handler_failures(frame, &mut reports);
    }
}

/// The frame's side of running registered jobs: a wave waits for its pool items here, and
/// unordered writes become diagnostics.
impl PhaseHost for ScriptDomain {
    /// Waits until every slot has settled, draining the mailbox whenever something reaches it
    /// (a forwarded query, the commands an item recorded before it settles), at most
    /// [`WAVE_WAIT`](FrameReport::WAVE_WAIT) or the domain's run deadline, whichever is shorter.
    fn settle(&self, slots: &[Arc<OutcomeSlot>]) -> Duration {
        frame::settle_wave(&self.current, slots, || self.drain_mailbox())
    }

    fn unordered_write(&self, phase: &str, first: &str, second: &str, name: &str) {
        let id = self.current.principal.id;
        let diagnostic = frame::unordered_writes(&self.name, id, phase, first, second, name);
        self.reporting.diagnose(Severity::Warning, &diagnostic);
    }
}
