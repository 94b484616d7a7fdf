//! `ScriptDomain`: an isolated Luau authority living on its engine thread.
//!
//! A domain owns its engine VM, its principal (id and generation) and the receiving end of its
//! mailbox. It is `!Send`: it lives on the thread that made it, and other threads reach it only
//! through its [`DomainMailbox`]. Pumping the domain drains the mailbox (settling promises homed
//! in the engine VM), then resumes the tasks that became ready.

use std::cell::RefCell;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};
use mlua::{Lua, MultiValue, Value};

use crate::error::{DispatchRefusal, Error, NameRefusal, Result, SpecSetting};
use crate::jobs::{
    self, DomainEvent, DomainMailbox, HomeKind, HostSlot, Item, ItemArgs, JobInfo, JobOptions,
    JobShared, JobsHome, Pool, PrincipalCell, Promise, Registry, ReplyTo, MAX_DEADLINE,
};
use crate::principal::diagnostic::DiagnosticSlot;
use crate::principal::profile::ProfileSlot;
use crate::principal::{capability, diagnostic, event_queue, profile};
use crate::principal::{
    Attribution, Diagnostic, DiagnosticSink, DomainId, EventLimits, Generation, LogSink, LogSlot,
    Principal, ProfileSink, Severity,
};
use crate::shared::SharedStore;
use crate::value::Message;
use crate::vm::{self, Owner, Plan, TaskFailure, Vm, UNAWAITED_KEPT};

pub(crate) mod actor;
mod chrome_trace;
mod context;
mod emit;
mod event_handlers;
pub(crate) mod fs;
mod generation;
mod handler_label;
mod host_promises;
mod interfaces;
mod lifecycle;
mod load;
pub(crate) mod log_api;
mod owned;
mod reload;
mod reports;
mod scheduler;
mod script_file;
mod services;
mod stall;
mod stats;
#[cfg(feature = "tracing")]
mod tracing_sink;

pub use actor::{
    FailurePolicy, LiveWorkers, WorkerError, WorkerStage, MAX_LIVE_WORKERS, MAX_WORKER_BYTES,
    WORKER_SPAWN,
};
pub use chrome_trace::ChromeTrace;
pub use context::{ContextSpec, FixedStep, MAX_CONTEXT_NAME};
pub(crate) use event_handlers::events_module;
pub use event_handlers::EventReport;
pub(crate) use interfaces::interfaces_module;
pub use interfaces::{InterfaceField, InterfaceInfo, MAX_INTERFACE_NAME};
pub use lifecycle::DomainState;
pub use load::{Load, LOAD_BOUND};
pub use owned::{ResourceId, ResourceOwner};
pub use reports::{DROPPED_REPORTS, MAX_REPORTS};
pub use scheduler::{AdvanceReport, HandlerTiming, PhaseReport};

pub use services::FrameReport;
use services::{EngineServices, Service};
pub use stats::DomainStats;
#[cfg(feature = "tracing")]
pub use tracing_sink::TracingSink;

static NEXT_DOMAIN: AtomicU64 = AtomicU64::new(1);

/// The longest `run_until_idle` waits between two frames while work is in flight, so tasks
/// waiting on frames (in the engine VM or on workers) see frames pass.
const FRAME_INTERVAL: Duration = Duration::from_millis(16);

/// How often `run_until_idle` looks for edited module sources while a script keeps it busy.
const SOURCE_CHECK_INTERVAL: Duration = Duration::from_millis(250);

/// How to make a [`ScriptDomain`].
///
/// ```
/// use skein::{DomainSpec, Plan};
/// let spec = DomainSpec::new("editor").plan(Plan::new().memory_limit(128 << 20));
/// assert_eq!(spec.name(), "editor");
/// ```
#[derive(Clone, Debug)]
pub struct DomainSpec {
    name: String,
    plan: Plan,
    warm_bound: Duration,
    contexts: Vec<ContextSpec>,
    fixed_step: FixedStep,
    grant: capability::Grant,
    event_limits: EventLimits,
    worker_failures: FailurePolicy,
    worker_budget: Duration,
    run_deadline: Duration,
    load_bound: Duration,
    profile: ProfileSlot,
    logs: LogSlot,
    diagnostics: DiagnosticSlot,
    detect_stalls: bool,
}

impl DomainSpec {
    /// A spec with the default [`Plan`].
    pub fn new(name: impl Into<String>) -> DomainSpec {
        DomainSpec {
            name: name.into(),
            plan: Plan::new(),
            warm_bound: jobs::WARM_BOUND,
            contexts: Vec::new(),
            fixed_step: FixedStep::default(),
            grant: capability::Grant::default(),
            event_limits: EventLimits::default(),
            worker_failures: FailurePolicy::Stop,
            worker_budget: MAX_DEADLINE,
            run_deadline: MAX_DEADLINE,
            load_bound: load::LOAD_BOUND,
            profile: ProfileSlot::default(),
            logs: LogSlot::default(),
            diagnostics: DiagnosticSlot::default(),
            detect_stalls: false,
        }
    }

    /// Promises that nothing outside the domain's own code will ever wake it, and asks
    /// [`run_until_idle`](ScriptDomain::run_until_idle) to end with [`Error::Stalled`] when
    /// its tasks wait on something nothing can settle. The `skein` runner turns it on: it has
    /// no host code, so there nothing but the script's own tasks can push a queue or settle a
    /// promise.
    ///
    /// A host that posts events, settles host promises, answers services or pushes shared
    /// queues from other threads must leave it off: `run_until_idle` cannot see such a thread,
    /// and would call a run that only waits for it stalled.
    ///
    /// The verdict, holding for a whole quiet interval of 500 ms: no
    /// resume under way or made in any VM of the domain (the engine VM and its worker VMs),
    /// nothing ready in the engine VM and its mailbox empty, no registered job live, no
    /// `@skein/worker` thread alive, and no timer of any of those VMs due within
    /// [`STALL_HORIZON`](crate::STALL_HORIZON) (a day): a longer wait, such as
    /// `task.delay(math.huge)`, counts as never. Every VM reports its resumes to a few shared
    /// counters while this is on (two atomic adds per resume); without it nothing is counted.
    ///
    /// ```
    /// use skein::{DomainSpec, Error, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let domain = ScriptDomain::new(&pool, DomainSpec::new("main").detect_stalls())?;
    /// domain.exec("task.spawn(function() jobs.shared.queue('work'):pop() end)")?;
    /// let Err(Error::Stalled { waits }) = domain.run_until_idle() else { panic!() };
    /// assert_eq!(waits, ["a task waits on SharedQueue:pop of queue 'work' (no task can push it)"]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn detect_stalls(mut self) -> DomainSpec {
        self.detect_stalls = true;
        self
    }

    /// Sends the domain's costs to `sink`: its creation, start and stop, every context handler
    /// call, every pool item its code dispatched (on the worker that ran it), and every stale
    /// event (see [`ProfileKind`]). A restart keeps the sink. Without one nothing is measured.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use skein::{ChromeTrace, DomainSpec};
    /// let spec = DomainSpec::new("game").profile(Arc::new(ChromeTrace::new()));
    /// assert!(spec.has_profile());
    /// ```
    pub fn profile(mut self, sink: Arc<dyn ProfileSink>) -> DomainSpec {
        self.profile = ProfileSlot(Some(sink));
        self
    }

    /// Sends the `@skein/log` records of the domain's engine and worker VMs to `sink` (see
    /// [`LogSink`]). A restart keeps the sink. Without one each record is a line on stderr.
    pub fn logs(mut self, sink: Arc<dyn LogSink>) -> DomainSpec {
        self.logs = LogSlot(Some(sink));
        self
    }

    /// Sends every [`Diagnostic`] the domain makes to `sink` as it is made (see
    /// [`DiagnosticSink`]), besides the reports that carry them. A restart keeps the sink.
    pub fn diagnostics(mut self, sink: Arc<dyn DiagnosticSink>) -> DomainSpec {
        self.diagnostics = DiagnosticSlot(Some(sink));
        self
    }

    /// Whether a profile sink is set.
    pub fn has_profile(&self) -> bool {
        self.profile.0.is_some()
    }

    /// Sets the bounds of the domain's event queue (see [`EventLimits`] for the defaults).
    /// A `per_drain` or `name` of zero is refused by [`ScriptDomain::new`].
    ///
    /// ```
    /// use skein::{DomainSpec, EventLimits};
    /// let limits = EventLimits { per_drain: 64, ..EventLimits::default() };
    /// let spec = DomainSpec::new("game").event_limits(limits);
    /// assert_eq!(spec.get_event_limits().per_drain, 64);
    /// ```
    pub fn event_limits(mut self, limits: EventLimits) -> DomainSpec {
        self.event_limits = limits;
        self
    }

    /// The bounds the domain's event queue will have.
    pub fn get_event_limits(&self) -> EventLimits {
        self.event_limits
    }

    /// Declares a context: when scripts' handlers may run (see [`ContextSpec`]). Contexts of
    /// equal priority run in the order they are declared here. Declarations belong to the
    /// host: a restart keeps them.
    ///
    /// ```
    /// use skein::{ContextSpec, DomainSpec, Phase};
    /// let spec = DomainSpec::new("game").context(ContextSpec::new("ui").phases([Phase::Input]))?;
    /// let again = spec.context(ContextSpec::new("ui")).unwrap_err();
    /// assert_eq!(again.to_string(), "context: a context named 'ui' is declared already");
    /// # Ok::<(), skein::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Spec`] ([`SpecSetting::Context`]) when the name is not 1 to 64 bytes or is
    /// declared already, or the budget is zero or longer than [`MAX_DEADLINE`].
    pub fn context(mut self, context: ContextSpec) -> Result<DomainSpec> {
        context.check(&self.contexts)?;
        self.contexts.push(context);
        Ok(self)
    }

    /// Sets how [`ScriptDomain::advance`] turns time into `fixedUpdate` steps (default: 1/60 s,
    /// at most 5 per advance). A zero step is refused by [`ScriptDomain::new`].
    pub fn fixed_step(mut self, fixed: FixedStep) -> DomainSpec {
        self.fixed_step = fixed;
        self
    }

    /// Sets what the domain's code may do. Without it the grant is empty: every
    /// [`require_capability`](crate::require_capability) is denied.
    pub fn grant(mut self, grant: capability::Grant) -> DomainSpec {
        self.grant = grant;
        self
    }

    /// Sets what the domain's workers (`@skein/worker`) do after their handler fails on a
    /// message: [`FailurePolicy::Stop`] (the default) or [`FailurePolicy::Continue`]. Every
    /// failure is reported either way, and none fails the domain. Scripts can't choose it.
    ///
    /// ```
    /// use skein::{DomainSpec, FailurePolicy};
    /// let spec = DomainSpec::new("tools").worker_failures(FailurePolicy::Continue);
    /// assert_eq!(spec.worker_failure_policy(), FailurePolicy::Continue);
    /// ```
    pub fn worker_failures(mut self, policy: FailurePolicy) -> DomainSpec {
        self.worker_failures = policy;
        self
    }

    /// Sets the budget of one run of a worker's handler (from a resume to its next yield or
    /// return): by default, and at most, [`MAX_DEADLINE`] (60 s). A handler that runs past it
    /// fails at the `handler` stage, as a failure of its own code would.
    ///
    /// ```
    /// use std::time::Duration;
    /// use skein::{DomainSpec, Pool, ScriptDomain};
    /// let spec = DomainSpec::new("tools").worker_budget(Duration::from_millis(250));
    /// assert_eq!(spec.worker_run_budget(), Duration::from_millis(250));
    /// let zero = ScriptDomain::new(&Pool::new(1), DomainSpec::new("z").worker_budget(Duration::ZERO));
    /// assert_eq!(zero.err().unwrap().to_string(), "worker budget: must be more than zero and at most 60 s");
    /// ```
    pub fn worker_budget(mut self, budget: Duration) -> DomainSpec {
        self.worker_budget = budget;
        self
    }

    /// Sets the longest one run of the domain's code may take (from a resume to its next yield
    /// or return): its engine tasks, and its jobs, whose `opts.deadline` may not ask for more.
    /// By default, and at most, [`MAX_DEADLINE`] (60 s). A host that runs scripts it does not
    /// trust in a frame loop sets it to what a frame can spare.
    ///
    /// ```
    /// use std::time::Duration;
    /// use skein::{DomainSpec, Pool, ScriptDomain};
    /// let pool = Pool::new(1);
    /// let spec = DomainSpec::new("mod").run_deadline(Duration::from_millis(50));
    /// assert_eq!(spec.get_run_deadline(), Duration::from_millis(50));
    /// let domain = ScriptDomain::new(&pool, spec)?;
    /// let err = domain.eval("while true do end").unwrap_err().to_string();
    /// assert!(err.contains("deadline exceeded: one run took longer than 0.05 s"), "{err}");
    /// let zero = ScriptDomain::new(&pool, DomainSpec::new("z").run_deadline(Duration::ZERO));
    /// assert_eq!(zero.err().unwrap().to_string(), "run deadline: must be more than zero and at most 60 s");
    /// # Ok::<(), skein::Error>(())
    /// ```
    pub fn run_deadline(mut self, deadline: Duration) -> DomainSpec {
        self.run_deadline = deadline;
        self
    }

    /// The longest one run of the domain's code may take.
    pub fn get_run_deadline(&self) -> Duration {
        self.run_deadline
    }

    /// Sets how long the load of a [`restart`](ScriptDomain::restart) or
    /// [`reload`](ScriptDomain::reload) may take, waits included, before it fails: by default
    /// [`LOAD_BOUND`] (30 s), at most [`MAX_DEADLINE`] (60 s).
    ///
    /// ```
    /// use std::time::Duration;
    /// use skein::{DomainSpec, Pool, ScriptDomain};
    /// let spec = DomainSpec::new("ui").load_bound(Duration::from_secs(2));
    /// assert_eq!(spec.get_load_bound(), Duration::from_secs(2));
    /// let zero = ScriptDomain::new(&Pool::new(1), DomainSpec::new("z").load_bound(Duration::ZERO));
    /// assert_eq!(zero.err().unwrap().to_string(), "load bound: must be more than zero and at most 60 s");
    /// ```
    pub fn load_bound(mut self, bound: Duration) -> DomainSpec {
        self.load_bound = bound;
        self
    }

    /// How long a restart's or reload's load may take.
    pub fn get_load_bound(&self) -> Duration {
        self.load_bound
    }

    /// The budget of one run of a worker's handler.
    pub fn worker_run_budget(&self) -> Duration {
        self.worker_budget
    }

    /// What the domain's workers do after a handler failure.
    pub fn worker_failure_policy(&self) -> FailurePolicy {
        self.worker_failures
    }

    /// Grants the domain a part of `parent`'s grant: `wanted`, which must be a subset of what
    /// `parent` holds (the file-system roots of a kept `filesystem.read` / `filesystem.write`
    /// are the parent's). Authority only shrinks on the way to a child domain; a later
    /// [`grant`](Self::grant) replaces this one, as the host's [`RootAuthority`] can always do.
    ///
    /// ```
    /// use skein::{CapabilityId, CapabilitySet, DomainSpec, Pool, RootAuthority, ScriptDomain};
    ///
    /// let id = |s| CapabilityId::new(s).unwrap();
    /// let pool = Pool::new(1);
    /// let grant = RootAuthority::new().grant(CapabilitySet::from_iter([id("input.observe"), id("audio.play")]));
    /// let game = ScriptDomain::new(&pool, DomainSpec::new("game").grant(grant))?;
    /// let hud = DomainSpec::new("hud").delegate_from(&game, CapabilitySet::from_iter([id("audio.play")]))?;
    /// assert_eq!(hud.granted().capabilities(), &CapabilitySet::from_iter([id("audio.play")]));
    ///
    /// let err = DomainSpec::new("net")
    ///     .delegate_from(&game, CapabilitySet::from_iter([id("net.connect")]))
    ///     .unwrap_err();
    /// assert_eq!(err.to_string(), "domain 'game' cannot delegate capabilities it does not hold: net.connect");
    /// # Ok::<(), skein::Error>(())
    /// ```
    ///
    /// [`RootAuthority`]: crate::RootAuthority
    ///
    /// # Errors
    /// [`Error::OverDelegation`] naming `domain '<parent name>'` and every wanted capability
    /// the parent does not hold.
    pub fn delegate_from(
        mut self,
        parent: &ScriptDomain,
        wanted: capability::CapabilitySet,
    ) -> Result<DomainSpec> {
        let who = format!("domain '{}'", parent.name());
        self.grant = parent.grant().narrowed(&who, &wanted)?;
        Ok(self)
    }

    /// The grant the domain will hold.
    pub fn granted(&self) -> &capability::Grant {
        &self.grant
    }

    /// Shortens the bound on one `jobs.warm` entry's run ([`WARM_BOUND`](crate::WARM_BOUND)),
    /// so tests can reach it. Not part of the stable surface.
    #[doc(hidden)]
    pub fn warm_bound(mut self, bound: Duration) -> DomainSpec {
        self.warm_bound = bound;
        self
    }

    /// Sets the plan every VM of the domain is built from.
    pub fn plan(mut self, plan: Plan) -> DomainSpec {
        self.plan = plan;
        self
    }

    /// The domain's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// A failure that reached no awaiting code: a task that raised, attributed to its job or script.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// What it ran for: `job 'solver'`, `script main.luau`.
    pub source: String,
    /// The error, with its Luau stack.
    pub message: String,
}

/// An isolated Luau authority: its engine VM, its principal and its mailbox.
///
/// A domain is `!Send`; it lives on the thread that made it (its engine thread):
///
/// ```compile_fail
/// fn assert_send<T: Send>() {}
/// assert_send::<skein::ScriptDomain>();
/// ```
///
/// ```
/// use skein::{DomainSpec, Message, Plan, Pool, ScriptDomain};
///
/// let dir = tempfile::tempdir()?;
/// std::fs::write(dir.path().join("math.luau"), "return { double = function(x) return x * 2 end }")?;
/// let pool = Pool::new(2);
/// let spec = DomainSpec::new("main").plan(Plan::new().root(dir.path()));
/// let domain = ScriptDomain::new(&pool, spec)?;
/// let answer = domain.eval(r#"return jobs.dispatch("./math", "double", 21):await()"#)?;
/// assert_eq!(answer, Message::Number(42.0));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct ScriptDomain {
    name: String,
    /// Native resources host services made for the domain's code ([`ScriptDomain::own`]).
    owned: Rc<owned::OwnedResources>,
    /// The highest generation number handed out: the current one, or a later reload
    /// candidate's that was discarded.
    last_generation: std::cell::Cell<Generation>,
    /// How long a restart's or reload's load may take.
    load_bound: Duration,
    pool: Pool,
    /// What the current generation owns; a restart or reload replaces it whole.
    current: generation::GenerationState,
    /// The mailboxes of ended generations, drained into `stale` until their last sender goes.
    stale_rx: RefCell<Vec<Receiver<DomainEvent>>>,
    /// Events of ended generations that arrived and were discarded unapplied.
    stale: std::cell::Cell<u64>,
    reports: Rc<RefCell<reports::Reports>>,
    /// Failures of scripts the host started: `run_until_idle` answers the first.
    failures: Rc<RefCell<Vec<String>>>,
    /// The host's engine services and this frame's counts.
    services: Rc<EngineServices>,
    /// The sum of the `dt` given to [`frame`](Self::frame).
    frame_time: std::cell::Cell<Duration>,
    /// Where the domain is in its life; shared with the completion of a loading script.
    state: Rc<std::cell::Cell<DomainState>>,
    /// The scheduler entry running now, if any: a second one is `Reentrant`.
    busy: std::cell::Cell<Option<&'static str>>,
    fixed_step: FixedStep,
    /// Time `advance` was given that has not made a whole fixed step yet.
    accumulator: std::cell::Cell<Duration>,
    /// Handlers bound to event names, routes, and the event queue's engine-side state.
    event_handlers: Rc<event_handlers::EventHandlers>,
    /// When `run_until_idle` last ran the registered jobs: they run at most once per
    /// [`FRAME_INTERVAL`] there.
    jobs_ran: std::cell::Cell<Option<Instant>>,
    /// Where every diagnostic goes as it is made, if anywhere.
    diagnostics: diagnostic::Diagnostics,
    /// Running totals for [`stats`](Self::stats).
    counters: stats::Counters,
    /// The owner of the last handler call, kept when that call ended in its first run and
    /// nothing else held it: the next call refills it instead of allocating one.
    spare_owner: std::cell::Cell<Option<Rc<Owner>>>,
    _engine_thread: PhantomData<Rc<()>>,
}

impl ScriptDomain {
    /// Makes a domain served by `pool`, building its engine VM on this thread.
    ///
    /// The domain is [`Ready`](DomainState::Ready) when this returns.
    ///
    /// # Errors
    /// [`Error::Vm`] when the plan's VM cannot be built; [`Error::Spec`] naming the
    /// [`SpecSetting`] when the spec's fixed step is zero, its event limits' `per_drain` or
    /// `name` is, or its worker budget, run deadline or load bound is zero or past
    /// [`MAX_DEADLINE`]; [`Error::OverDelegation`] when a context asks for capabilities the
    /// spec's grant does not hold (naming `context '<name>'` and what it lacks).
    pub fn new(pool: &Pool, spec: DomainSpec) -> Result<ScriptDomain> {
        let started = Instant::now();
        spec.fixed_step.check()?;
        if spec.event_limits.per_drain == 0 || spec.event_limits.name == 0 {
            return Err(Error::Spec {
                setting: SpecSetting::EventLimits,
                message: "event_limits: per_drain and name must be at least 1".to_owned(),
            });
        }
        if spec.worker_budget.is_zero() || spec.worker_budget > MAX_DEADLINE {
            return Err(Error::Spec {
                setting: SpecSetting::ActorBudget,
                message: format!(
                    "worker budget: must be more than zero and at most {} s",
                    vm::format_seconds(MAX_DEADLINE)
                ),
            });
        }
        if spec.run_deadline.is_zero() || spec.run_deadline > MAX_DEADLINE {
            return Err(Error::Spec {
                setting: SpecSetting::RunDeadline,
                message: format!(
                    "run deadline: must be more than zero and at most {} s",
                    vm::format_seconds(MAX_DEADLINE)
                ),
            });
        }
        if spec.load_bound.is_zero() || spec.load_bound > MAX_DEADLINE {
            return Err(Error::Spec {
                setting: SpecSetting::LoadBound,
                message: format!(
                    "load bound: must be more than zero and at most {} s",
                    vm::format_seconds(MAX_DEADLINE)
                ),
            });
        }
        let bindings = scheduler::Bindings::new(spec.contexts.clone(), &spec.grant)?;
        let id = Principal {
            domain: DomainId(NEXT_DOMAIN.fetch_add(1, Ordering::Relaxed)),
            generation: Generation(1),
        };
        let queue = event_queue::EventQueue::new(spec.event_limits, id.generation);
        let (mailbox, rx) = DomainMailbox::new(queue.clone(), id.generation);
        let mut cell = PrincipalCell::new(
            id,
            spec.plan.clone(),
            mailbox,
            spec.run_deadline,
            spec.warm_bound,
        );
        cell.profile = spec.profile.0;
        cell.logs = spec.logs.0;
        cell.liveness = spec.detect_stalls.then(Arc::default);
        cell.authority = Arc::new(capability::Authority::new(
            spec.grant,
            capability::Attribution {
                domain_name: spec.name.clone(),
                domain: id.domain,
                generation: id.generation,
                context: None,
                worker: None,
            },
            Arc::new(capability::DenialLog::new(
                cell.profile.clone(),
                spec.diagnostics.0.clone(),
            )),
        ));
        let principal = Arc::new(cell);
        let reports = Rc::new(RefCell::new(reports::Reports::default()));
        let vm = engine_vm(&principal, pool, &reports)?;
        let registry = Registry::new(
            principal.clone(),
            pool.shared().clone(),
            report_sink(&reports),
        );
        vm.lua.set_app_data(registry.clone());
        let event_handlers =
            event_handlers::EventHandlers::new(queue, &spec.name, id.domain, &bindings);
        event_handlers::install_events_module(&vm.lua, &event_handlers, id.generation)?;
        interfaces::install_interfaces_module(&vm.lua, &spec.name, id.generation)?;
        scheduler::install_context_module(&vm.lua, &bindings)?;
        let actors = actor::Actors::new(
            principal.clone(),
            pool.shared().clone(),
            spec.worker_failures,
            spec.worker_budget,
        );
        actor::install_engine(&vm.lua, &actors)?;
        let domain = ScriptDomain {
            owned: owned::OwnedResources::new(id.generation),
            last_generation: std::cell::Cell::new(id.generation),
            load_bound: spec.load_bound,
            name: spec.name,
            pool: pool.clone(),
            current: generation::GenerationState {
                principal,
                vm,
                rx,
                registry,
                bindings,
                actors,
                host_promises: RefCell::default(),
            },
            stale_rx: RefCell::new(Vec::new()),
            stale: std::cell::Cell::new(0),
            reports,
            failures: Rc::new(RefCell::new(Vec::new())),
            services: Rc::new(EngineServices::default()),
            frame_time: std::cell::Cell::new(Duration::ZERO),
            state: Rc::new(std::cell::Cell::new(DomainState::Ready)),
            busy: std::cell::Cell::new(None),
            fixed_step: spec.fixed_step,
            accumulator: std::cell::Cell::new(Duration::ZERO),
            jobs_ran: std::cell::Cell::new(None),
            event_handlers,
            diagnostics: spec.diagnostics.0,
            counters: stats::Counters::default(),
            spare_owner: std::cell::Cell::new(None),
            _engine_thread: PhantomData,
        };
        domain.profiled(profile::ProfileKind::DomainCreated, None, None, started);
        Ok(domain)
    }

    /// Sends `d` to the domain's diagnostic sink, if it has one.
    pub(crate) fn diagnose(&self, severity: Severity, d: &Diagnostic) {
        self.counters.diagnosed(severity);
        if let Some(sink) = &self.diagnostics {
            sink.diagnostic(severity, d);
        }
    }

    /// Sends an engine-thread event to the domain's profile sink, if it has one: measured from
    /// `started` to now, named `name` or else the domain's name.
    pub(crate) fn profiled(
        &self,
        kind: profile::ProfileKind,
        context: Option<&str>,
        name: Option<String>,
        started: Instant,
    ) {
        self.profiled_after(kind, context, name, started, None);
    }

    /// As [`profiled`](Self::profiled), for work that waited `queue_delay` before `started`.
    pub(crate) fn profiled_after(
        &self,
        kind: profile::ProfileKind,
        context: Option<&str>,
        name: Option<String>,
        started: Instant,
        queue_delay: Option<Duration>,
    ) {
        if let Some(sink) = &self.current.principal.profile {
            let attribution = Attribution {
                context: context.map(str::to_owned),
                ..self.current.principal.authority.attribution().clone()
            };
            let name = name.unwrap_or_else(|| self.name.clone());
            profile::emit(&**sink, kind, attribution, name, started, queue_delay);
        }
    }

    /// The domain's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The principal the pool runs this domain's work as.
    pub fn principal(&self) -> Principal {
        self.current.principal.id
    }

    /// The domain's stable id.
    pub fn id(&self) -> DomainId {
        self.current.principal.id.domain
    }

    /// The current generation.
    pub fn generation(&self) -> Generation {
        self.current.principal.id.generation
    }

    /// The `Send` handle other threads reach this domain through.
    pub fn mailbox(&self) -> DomainMailbox {
        self.current.principal.mailbox.clone()
    }

    /// The pool serving this domain.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The engine VM, for host code that installs its own bindings.
    ///
    /// A VM never leaves the thread that built it: `mlua::Lua` is not `Send` (Skein does not use
    /// mlua's `send` feature), so this does not compile:
    ///
    /// ```compile_fail
    /// fn assert_send<T: Send>() {}
    /// assert_send::<skein::mlua::Lua>();
    /// ```
    pub fn lua(&self) -> &Lua {
        &self.current.vm.lua
    }

    /// Starts the script at `path` as a task of the engine VM, with `args` as its `...`.
    /// Errors it raises later are answered by [`run_until_idle`](Self::run_until_idle).
    ///
    /// # Errors
    /// [`Error::Io`] naming the path when the file can't be read, is not a regular file or is
    /// longer than [`MAX_SOURCE_BYTES`](crate::MAX_SOURCE_BYTES); [`Error::Script`] when it
    /// does not compile.
    pub fn run_file(&self, path: impl AsRef<Path>, args: &[String]) -> Result<()> {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.run_file_bytes(path, &args)
    }

    /// As [`run_file`](Self::run_file), with arguments as bytes: Luau strings are bytes, so an
    /// argument need not be UTF-8 (a file name from the command line, say).
    ///
    /// ```
    /// use skein::{DomainSpec, Pool, ScriptDomain};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("main.luau");
    /// std::fs::write(&path, "local name = ...\nassert(#name == 4 and string.byte(name, 4) == 0xE9)")?;
    /// let pool = Pool::new(1);
    /// let domain = ScriptDomain::new(&pool, DomainSpec::new("main"))?;
    /// domain.run_file_bytes(&path, &[b"caf\xE9"])?; // Latin-1, not UTF-8
    /// domain.run_until_idle()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// As [`run_file`](Self::run_file).
    pub fn run_file_bytes(&self, path: impl AsRef<Path>, args: &[&[u8]]) -> Result<()> {
        let (path, source) = script_file::read(path.as_ref())?;
        let name = format!("@{}", path.display());
        let args: Vec<Value> = args
            .iter()
            .map(|a| self.current.vm.lua.create_string(a).map(Value::String))
            .collect::<mlua::Result<_>>()?;
        self.start_chunk(
            &source,
            &name,
            &display_name(&path),
            MultiValue::from_iter(args),
            self.begin_load(),
        )
        .map(|_| ())
    }

    /// A main script starts: a domain that is not running yet is `Loading` until it ends.
    /// Answers whether this script decides the state.
    fn begin_load(&self) -> bool {
        let loads = matches!(
            self.state.get(),
            DomainState::Ready | DomainState::Failed | DomainState::Created
        );
        if loads {
            self.state.set(DomainState::Loading);
        }
        loads
    }

    /// Starts `source` as a task of the engine VM; `require` and `jobs.dispatch` in it resolve
    /// from the plan's root directory.
    ///
    /// # Errors
    /// [`Error::Script`] when it does not compile.
    pub fn exec(&self, source: &str) -> Result<()> {
        self.start_chunk(
            source.as_bytes(),
            "=exec",
            "exec",
            MultiValue::new(),
            self.begin_load(),
        )
        .map(|_| ())
    }

    /// Runs `source` as a task of the engine VM, pumping the domain until it returns, and
    /// answers a copy of what it returned. Meant for tests and tools; frames of other work run
    /// meanwhile.
    ///
    /// # Errors
    /// [`Error::Script`] with the error and Luau stack when it raises; [`Error::Transfer`] when
    /// its result can't be copied.
    pub fn eval(&self, source: &str) -> Result<Message> {
        let slot =
            self.start_chunk(source.as_bytes(), "=eval", "eval", MultiValue::new(), false)?;
        loop {
            if let Some(result) = slot.borrow_mut().take() {
                return result;
            }
            if !self.pump_once(true, false) {
                return Err(Error::Script(
                    "eval: the chunk is waiting on something that will never happen".to_owned(),
                ));
            }
        }
    }

    fn start_chunk(
        &self,
        source: &[u8],
        chunk_name: &str,
        label: &str,
        args: MultiValue,
        loads: bool,
    ) -> Result<Rc<RefCell<Option<Result<Message>>>>> {
        // The chunk may dispatch before its first yield: edits must be seen before it runs.
        vm::check_sources();
        let lua = &self.current.vm.lua;
        let function = vm::source::compile(lua, source, chunk_name).map_err(|e| {
            if loads {
                self.state.set(DomainState::Failed);
            }
            Error::Script(vm::error_message(&e))
        })?;
        let slot: Rc<RefCell<Option<Result<Message>>>> = Rc::new(RefCell::new(None));
        let out = slot.clone();
        let failures = self.failures.clone();
        let script = format!("script {label}");
        let state = loads.then(|| self.state.clone());
        let completion: vm::Completion = Box::new(move |_lua: &Lua, result, _commands| {
            if let Some(state) = state.filter(|s| s.get() == DomainState::Loading) {
                state.set(if result.is_ok() {
                    DomainState::Ready
                } else {
                    DomainState::Failed
                });
            }
            let answer = match result {
                Ok(values) => {
                    let first = values.into_iter().next().unwrap_or(Value::Nil);
                    Message::from_lua(&first, "result").map_err(Error::from)
                }
                Err(failure) => {
                    let text = format!("{script} failed: {failure}");
                    failures.borrow_mut().push(text.clone());
                    Err(Error::Script(text))
                }
            };
            *out.borrow_mut() = Some(answer);
        });
        let owner = Rc::new(Owner::new(
            Arc::new(format!("script {label}")),
            self.current.principal.max_deadline,
            Some(completion),
        ));
        self.current.vm.start(function, args, owner)?;
        Ok(slot)
    }

    /// Hands `module.entry(args)` to the pool from host code; `module` resolves from the plan's
    /// root directory.
    ///
    /// Edited module sources are picked up when the host next pumps or runs the domain
    /// ([`pump`](Self::pump), [`eval`](Self::eval), [`exec`](Self::exec),
    /// [`run_until_idle`](Self::run_until_idle)); a host dispatch does not look at the file
    /// system, so issuing many in a row costs no system call each.
    ///
    /// # Errors
    /// [`Error::Dispatch`] ([`DispatchRefusal::Module`]) when the module can't be resolved.
    pub fn dispatch(&self, module: &str, entry: &str, args: Message) -> Result<Promise<Message>> {
        self.dispatch_with(module, entry, args, &JobOptions::new())
    }

    /// [`dispatch`](Self::dispatch) with options: a name, a key, supersede and a deadline, as
    /// `jobs.dispatch`'s `opts` gives them to Luau.
    ///
    /// With a key the item runs in the worker VM the key is bound to, after every item of the
    /// key dispatched before it (from Luau or from Rust) has settled, so module state one item
    /// leaves is there for the next.
    ///
    /// ```
    /// use skein::{DomainSpec, JobOptions, Message, Plan, Pool, ScriptDomain};
    ///
    /// let dir = tempfile::tempdir()?;
    /// std::fs::write(
    ///     dir.path().join("counter.luau"),
    ///     "local n = 0 return { bump = function() n += 1 return n end }",
    /// )?;
    /// let pool = Pool::new(2);
    /// let domain = ScriptDomain::new(&pool, DomainSpec::new("main").plan(Plan::new().root(dir.path())))?;
    /// let bump = || domain.dispatch_with("./counter", "bump", Message::Nil, &JobOptions::new().key("a"));
    /// let (first, second) = (bump()?, bump()?);
    /// // One VM holds the key, so the second item sees the count the first one left.
    /// assert_eq!(first.wait()?, Message::Number(1.0));
    /// assert_eq!(second.wait()?, Message::Number(2.0));
    /// assert!(domain.release("a")?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Dispatch`] naming the [`DispatchRefusal`]: when the module can't be resolved,
    /// when an option breaks its rule (a key of 0 or more than 256 bytes, `supersede` without a
    /// key, a deadline of zero or past the domain's cap), or when the key is new and the pool
    /// holds 65,536 keys already. A refused dispatch queues nothing.
    pub fn dispatch_with(
        &self,
        module: &str,
        entry: &str,
        args: Message,
        opts: &JobOptions,
    ) -> Result<Promise<Message>> {
        let opts = opts.check(self.current.principal.max_deadline)?;
        let module = self
            .current
            .vm
            .core
            .modules
            .resolve(None, module)
            .map_err(|e| Error::Dispatch {
                refusal: DispatchRefusal::Module,
                message: format!("dispatch: {e}"),
            })?;
        let slot = HostSlot::new();
        let entry: Arc<str> = Arc::from(entry);
        let job = JobShared::new(
            opts.name,
            module.spec,
            entry.clone(),
            self.pool.shared().clone(),
            self.current.principal.id,
            opts.key.clone(),
        );
        let item = Item {
            principal: self.current.principal.clone(),
            authority: self.current.principal.authority.clone(),
            job: job.clone(),
            module: module.path,
            entry,
            args: ItemArgs::Plain(args),
            deadline: opts.deadline,
            reply: ReplyTo::Host(slot.clone()),
            queued_at: (opts.key.is_some() || self.current.principal.profile.is_some())
                .then(Instant::now),
            charge: None,
        };
        match opts.key {
            Some(key) => self
                .pool
                .shared()
                .dispatch_keyed(
                    (self.current.principal.id, key),
                    item,
                    opts.supersede,
                    "dispatch: key",
                )
                .map_err(|message| Error::Dispatch {
                    refusal: DispatchRefusal::KeyLimit,
                    message,
                })?,
            None => self.pool.shared().inject(item),
        }
        self.current
            .host_promises
            .borrow_mut()
            .track(&slot, job.clone());
        Ok(Promise::new(slot, Some(job)))
    }

    /// Ends the binding of `key` after the items of the key dispatched before this call have
    /// settled, as `jobs.release` does. Answers whether the pool held the key; when it did not,
    /// nothing is done.
    ///
    /// # Errors
    /// [`Error::Dispatch`] ([`DispatchRefusal::Key`]) when the key is not 1 to 256 bytes.
    pub fn release(&self, key: impl AsRef<[u8]>) -> Result<bool> {
        let key = key.as_ref();
        jobs::check_key(key, "release: key")?;
        let key = bytes::Bytes::copy_from_slice(key);
        Ok(self
            .pool
            .shared()
            .release_key((self.current.principal.id, key)))
    }

    /// The domain's shared store: the tables and queues its scripts reach as `jobs.shared`.
    /// The store belongs to this generation of the domain and ends with it.
    pub fn shared(&self) -> SharedStore {
        SharedStore::new(self.current.principal.shared.clone())
    }

    /// Drains the mailbox once, after discarding what reached the mailboxes of ended
    /// generations. Answers whether it handled anything.
    fn drain(&self) -> bool {
        self.drain_stale();
        let mut any = false;
        while let Ok(event) = self.current.rx.try_recv() {
            self.handle(event);
            any = true;
        }
        // The drain is the engine VM's start point for engine events.
        let events = &self.current.principal.events;
        any | jobs::deliver_events(
            &self.current.vm,
            events,
            self.current.principal.max_deadline,
        )
    }

    fn handle(&self, event: DomainEvent) {
        match event {
            DomainEvent::Settle { promise, outcome } => self.current.vm.settle(promise, outcome),
            DomainEvent::Report { label, failure } => self.reports.borrow_mut().push(Report {
                source: label,
                message: failure,
            }),
            DomainEvent::Parcel(parcel) => {
                crate::shared::receive_parcel(&self.current.vm.lua, parcel)
            }
            DomainEvent::Query {
                service,
                args,
                commands,
                reply,
                job,
                authority,
            } => {
                // A forwarded call runs as the work that made it: a service's
                // `require_capability` sees the item's authority (a context's part, when a
                // handler dispatched it), not the domain's whole grant.
                let _authority = capability::install(Some(
                    authority
                        .as_ref()
                        .unwrap_or(&self.current.principal.authority),
                ));
                self.apply(commands, None);
                let answer = self.services.answer(&service, args);
                if let Some(job) = job {
                    self.current.registry.count_forwarded(job);
                }
                self.deliver(reply, vm::Outcome::Resolved(answer));
            }
            DomainEvent::Registered(registration) => {
                self.current.registry.add_remote(*registration)
            }
            DomainEvent::RegisteredDone {
                job,
                commands,
                failure,
                authority,
            } => {
                if !commands.is_empty() {
                    // As the job's call ran: under the authority it was registered with.
                    let _authority = capability::install(Some(
                        authority
                            .as_ref()
                            .unwrap_or(&self.current.principal.authority),
                    ));
                    let source = self.current.registry.source(job);
                    self.apply_as(commands, &source);
                }
                self.current.registry.remote_done(job, failure);
            }
            DomainEvent::RegisteredControl { job, control } => {
                self.current.registry.control(job, control)
            }
            DomainEvent::Apply {
                commands,
                then,
                authority,
            } => {
                let _authority = capability::install(Some(
                    authority
                        .as_ref()
                        .unwrap_or(&self.current.principal.authority),
                ));
                self.apply(commands, then.as_ref().map(|s| s.job()));
                if let Some(mut settlement) = then {
                    if let Some((to, outcome)) = settlement.take() {
                        self.deliver(to, outcome);
                    }
                    // Dropping it now releases a keyed item's turn, after the reply.
                    drop(settlement);
                }
            }
        }
    }

    /// Applies recorded commands in order; a failure is reported, naming the job, and the rest
    /// still apply.
    fn apply(&self, commands: Vec<vm::ServiceCall>, job: Option<&JobShared>) {
        if commands.is_empty() {
            return;
        }
        let source = match job {
            Some(job) => job.to_string(),
            None => "engine services".to_owned(),
        };
        self.apply_as(commands, &source);
    }

    /// Applies commands in order, reporting each failure as `source`'s.
    fn apply_as(&self, commands: Vec<vm::ServiceCall>, source: &str) {
        for failure in self.services.apply(commands) {
            self.reports.borrow_mut().push(Report {
                source: source.to_owned(),
                message: failure,
            });
        }
    }

    /// Delivers an outcome on the engine thread: a promise of this VM directly, anything else
    /// the way a worker replies.
    fn deliver(&self, to: ReplyTo, outcome: vm::Outcome) {
        match to {
            ReplyTo::Engine(promise) => self.current.vm.settle(promise, outcome),
            other => jobs::reply(&self.current.principal, other, outcome, self.pool.shared()),
        }
    }

    /// Registers a query: a function of the host that answers a value, reached from Luau at
    /// the dotted global path `name` (`world.get`). In the engine VM the path calls `f`
    /// directly; in a worker VM it forwards the call to this thread and the calling task waits
    /// for the answer, after every command its job recorded before it has applied.
    ///
    /// `f` receives the call's arguments as one `Message::List`; an `Err` is raised to the
    /// caller naming the service, and so is a panic, which is contained.
    ///
    /// ```
    /// use skein::{DomainSpec, Message, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let domain = ScriptDomain::new(&pool, DomainSpec::new("main"))?;
    /// // Arguments arrive as one list; a Luau number is a `Message::Number`.
    /// domain.register_query("world.double", |args| match args {
    ///     Message::List(a) => match a.first() {
    ///         Some(Message::Number(n)) => Ok(Message::Number(n * 2.0)),
    ///         other => Err(format!("expected a number, got {other:?}")),
    ///     },
    ///     _ => unreachable!("arguments arrive as a list"),
    /// })?;
    /// assert_eq!(domain.eval("return world.double(21)")?, Message::Number(42.0));
    /// let err = domain.eval("return world.double('x')").unwrap_err().to_string();
    /// assert!(err.contains("engine service 'world.double' failed: expected a number"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Name`] naming the [`NameRefusal`]: when the name is not 1 to 256 bytes of
    /// dotted Luau identifiers, is registered already, or its path is taken in the engine VM (a
    /// global that is not a table, a read-only built-in table, or a value at the path itself).
    pub fn register_query<F>(&self, name: &str, f: F) -> Result<()>
    where
        F: Fn(Message) -> std::result::Result<Message, String> + 'static,
    {
        self.register(name, jobs::ServiceKind::Query, Service::Query(Box::new(f)))
    }

    /// Registers a command: a function of the host that changes host state and answers
    /// nothing, reached from Luau at the dotted global path `name` (`world.set`). In the engine
    /// VM the path calls `f` directly; in a worker VM the call is recorded and returns at once,
    /// and this thread applies the job's commands in the order it recorded them, before the
    /// job's promise settles.
    ///
    /// ```
    /// use std::{cell::RefCell, rc::Rc};
    /// use skein::{DomainSpec, Message, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let domain = ScriptDomain::new(&pool, DomainSpec::new("main"))?;
    /// let log = Rc::new(RefCell::new(Vec::new()));
    /// let sink = log.clone();
    /// domain.register_command("log.write", move |args| {
    ///     sink.borrow_mut().push(args);
    ///     Ok(())
    /// })?;
    /// domain.eval("log.write('a', 1.5)")?;
    /// let text = Message::String("a".into());
    /// assert_eq!(*log.borrow(), vec![Message::List(vec![text, Message::Number(1.5)])]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// As [`register_query`](Self::register_query).
    pub fn register_command<F>(&self, name: &str, f: F) -> Result<()>
    where
        F: FnMut(Message) -> std::result::Result<(), String> + 'static,
    {
        let service = Service::Command(RefCell::new(Box::new(f)));
        self.register(name, jobs::ServiceKind::Command, service)
    }

    fn register(&self, name: &str, kind: jobs::ServiceKind, service: Service) -> Result<()> {
        let refused = |refusal, message| Error::Name { refusal, message };
        jobs::check_service_name(name).map_err(|e| refused(NameRefusal::ServiceName, e))?;
        if self.services.contains(name) {
            return Err(refused(
                NameRefusal::ServiceTaken,
                format!("register: engine service '{name}' is registered already"),
            ));
        }
        let name: Arc<str> = Arc::from(name);
        let f =
            services::engine_function(&self.current.vm.lua, self.services.clone(), name.clone())?;
        jobs::install_at(&self.current.vm.lua, &name, f)
            .map_err(|e| refused(NameRefusal::ServicePath, format!("register: {e}")))?;
        self.current
            .principal
            .services
            .add(&name, kind)
            .map_err(|e| refused(NameRefusal::ServiceTaken, e))?;
        self.services.insert(name, service);
        Ok(())
    }

    /// One engine frame: drains the mailbox (applying recorded commands, answering forwarded
    /// queries, settling promises), moves the frame counter on (waking the tasks whose
    /// `task.waitFrames` it reached, here and on workers), then resumes the tasks that are
    /// ready. Never blocks. `dt` is what the host says the frame covers; task timers follow
    /// the wall clock, and `dt` only adds up in [`FrameReport::time`].
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
    /// A frame moves a ready domain to [`Running`](DomainState::Running). A stopped domain's
    /// frame does nothing; so does a frame asked for while a phase, advance or frame of the
    /// same domain runs (a handler reaching back through a host service): that is recorded as
    /// a [`Report`] naming [`Error::Reentrant`], and the report answered counts nothing.
    pub fn frame(&self, dt: Duration) -> FrameReport {
        match self.enter("frame") {
            Ok(_entered) => self.run_frame(dt),
            Err(e) => {
                if matches!(e, Error::Reentrant(_)) {
                    self.reports.borrow_mut().push(Report {
                        source: "frame".to_owned(),
                        message: e.to_string(),
                    });
                }
                FrameReport {
                    frame: self.frames(),
                    forwarded_calls: 0,
                    commands_applied: 0,
                    time: self.frame_time.get(),
                }
            }
        }
    }

    /// One frame, inside a scheduler entry.
    fn run_frame(&self, dt: Duration) -> FrameReport {
        vm::check_sources();
        self.services.forwarded.set(0);
        self.services.applied.set(0);
        self.frame_time.set(self.frame_time.get() + dt);
        let frame = self.round();
        FrameReport {
            frame,
            forwarded_calls: self.services.forwarded.get(),
            commands_applied: self.services.applied.get(),
            time: self.frame_time.get(),
        }
    }

    /// The frame counter: how many frames the domain has run ([`frame`](Self::frame), and each
    /// round of [`pump`](Self::pump), [`eval`](Self::eval) and
    /// [`run_until_idle`](Self::run_until_idle)).
    pub fn frames(&self) -> u64 {
        self.current.principal.frames.load(Ordering::Acquire)
    }

    /// One frame's work: drain, count the frame, wake frame waits, run the registered jobs
    /// phase by phase, step. Answers the frame.
    fn round(&self) -> u64 {
        self.drain();
        let frame = self.current.principal.frames.fetch_add(1, Ordering::AcqRel) + 1;
        self.current.vm.wake_frames(frame);
        self.current.registry.run(&self.current.vm, None);
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
        let known = self.current.registry.run(&self.current.vm, Some(name));
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
    /// [`Error::Name`] ([`NameRefusal::KernelName`] or [`NameRefusal::KernelTaken`]) when
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

    /// One round on the engine thread: drain the mailbox, then run the tasks that are ready.
    /// Never blocks. Answers whether anything happened.
    pub fn pump(&self) -> bool {
        vm::check_sources();
        let drained = self.drain();
        let frame = self.current.principal.frames.fetch_add(1, Ordering::AcqRel) + 1;
        let woke = self.current.vm.wake_frames(frame);
        let ran = self.current.vm.step();
        drained || woke || ran
    }

    /// Pumps once; when `block` and nothing is ready, waits for the mailbox, the next timer or
    /// (with `jobs`) the next time registered jobs are due. With `jobs` the round runs the
    /// registered jobs as a frame does, when [`FRAME_INTERVAL`] has passed since they last
    /// ran. Answers false when nothing is outstanding at all (idle): no task, no pending
    /// promise, no timer, and (with `jobs`) no registered job that is neither paused nor
    /// errored.
    fn pump_once(&self, block: bool, jobs: bool) -> bool {
        self.pump_once_until(block, jobs, None)
    }

    /// [`pump_once`](Self::pump_once), never waiting past `until` when it is given.
    fn pump_once_until(&self, block: bool, jobs: bool, until: Option<Instant>) -> bool {
        let drained = self.drain();
        let frame = self.current.principal.frames.fetch_add(1, Ordering::AcqRel) + 1;
        let woke = self.current.vm.wake_frames(frame);
        let live_jobs = jobs && self.current.registry.has_work();
        let jobs_due = live_jobs.then(|| match self.jobs_ran.get() {
            Some(at) => at + FRAME_INTERVAL,
            None => Instant::now(),
        });
        let ran_jobs = match jobs_due {
            Some(due) if due <= Instant::now() => {
                self.jobs_ran.set(Some(Instant::now()));
                self.current.registry.run(&self.current.vm, None);
                true
            }
            _ => false,
        };
        if drained | woke | ran_jobs | self.current.vm.step() || self.current.vm.has_ready() {
            return true;
        }
        // A pop parked by a task that has since ended would otherwise count as pending forever.
        crate::shared::sweep_parked_pops(&self.current.vm.lua);
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
        let received = self
            .current
            .rx
            .recv_timeout(wait)
            .map_err(|_| RecvTimeoutError::Timeout);
        if let Ok(event) = received {
            self.handle(event);
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
    /// The first failure of a script the host started ([`Error::Script`], with its Luau stack).
    pub fn run_until_idle(&self) -> Result<()> {
        vm::check_sources();
        let mut checked = Instant::now();
        let mut stall = stall::StallWatch::default();
        // With a stall check, a round never waits long, so the check runs while the engine
        // VM waits on a far timer alone.
        let round = |live: &Option<Arc<vm::Liveness>>| {
            live.as_ref().map(|_| Instant::now() + stall::STALL_ROUND)
        };
        while self.pump_once_until(true, true, round(&self.current.principal.liveness)) {
            // A script can run for minutes without returning to the host: look for edited
            // sources now and then, so an edit still reaches its next dispatch.
            if checked.elapsed() >= SOURCE_CHECK_INTERVAL {
                vm::check_sources();
                checked = Instant::now();
            }
            if let Some(live) = &self.current.principal.liveness {
                if stall.stalled(live, self.engine_still()) {
                    let waits = stall::describe(&self.current.vm);
                    // Still, with no task waiting and no promise pending: only a timer of a
                    // cancelled task was left, which nothing waits for. The run is over.
                    if waits.is_empty() {
                        break;
                    }
                    return self.end_stalled(waits);
                }
            }
        }
        self.report_unhandled_rejections();
        match self.failures.borrow_mut().drain(..).next() {
            Some(text) => Err(Error::Script(text)),
            None => Ok(()),
        }
    }

    /// The engine thread's part of a stall verdict: nothing ready in the engine VM, nothing in
    /// its mailbox, no registered job live and no `@skein/worker` thread alive.
    fn engine_still(&self) -> bool {
        !self.current.vm.has_ready()
            && self.current.rx.is_empty()
            && !self.current.registry.has_work()
            && self.current.actors.live().get() == 0
    }

    /// Ends a stalled `run_until_idle`: a failure already seen comes first, as it would have
    /// had the run ended; else [`Error::Stalled`] naming what the engine VM's tasks wait on.
    #[cold]
    fn end_stalled(&self, waits: Vec<String>) -> Result<()> {
        self.report_unhandled_rejections();
        if let Some(text) = self.failures.borrow_mut().drain(..).next() {
            return Err(Error::Script(text));
        }
        Err(Error::Stalled { waits })
    }

    /// Reports the engine VM's promises that were rejected with no code observing them: at the
    /// end of a run no task is left that could still await them, so each is a failure nobody
    /// handled (a `jobs.dispatch` whose promise was dropped, say).
    fn report_unhandled_rejections(&self) {
        let unhandled = self.current.vm.core.promises.borrow_mut().take_unhandled();
        let mut reports = self.reports.borrow_mut();
        for (what, failure) in unhandled.kept {
            reports.push(Report {
                source: format!("{what} promise nobody awaited"),
                message: failure.to_string(),
            });
        }
        if unhandled.past_bound > 0 {
            reports.push(Report {
                source: "promises nobody awaited".to_owned(),
                message: format!(
                    "{} more rejected promises nobody awaited (the first {UNAWAITED_KEPT} are \
                     reported in full)",
                    unhandled.past_bound
                ),
            });
        }
    }

    /// Takes the failures no code awaited (tasks that raised) and the capability denials
    /// (source `capability`), oldest first within each.
    pub fn take_reports(&self) -> Vec<Report> {
        let mut reports = self.reports.borrow_mut().take();
        let denials = self.current.principal.authority.denials().take();
        reports.extend(denials.into_iter().map(|message| Report {
            source: "capability".to_owned(),
            message,
        }));
        reports
    }

    /// How many capability checks the domain's code failed, in every VM and generation.
    pub fn denials(&self) -> u64 {
        self.current.principal.authority.denials().count()
    }

    /// What the domain's code may do.
    pub fn grant(&self) -> &capability::Grant {
        self.current.principal.authority.grant()
    }

    /// Takes the failures the domain's workers reported, oldest first. Each is also in
    /// [`take_reports`](Self::take_reports) as text, and reaches the domain's code once
    /// through `Worker:receive`.
    pub fn take_worker_failures(&self) -> Vec<WorkerError> {
        self.current.actors.take_failures()
    }

    /// A count of the domain's worker threads still alive, which outlives the domain: after
    /// a stop or a drop it reads 0. Not part of the stable surface.
    #[doc(hidden)]
    pub fn live_workers(&self) -> LiveWorkers {
        self.current.actors.live()
    }

    /// A spec for a child domain named `name` holding `wanted`, a part of this domain's grant:
    /// [`DomainSpec::new(name).delegate_from(self, wanted)`](DomainSpec::delegate_from).
    ///
    /// # Errors
    /// As [`DomainSpec::delegate_from`].
    pub fn child_spec(
        &self,
        name: impl Into<String>,
        wanted: capability::CapabilitySet,
    ) -> Result<DomainSpec> {
        DomainSpec::new(name).delegate_from(self, wanted)
    }

    /// Live tasks in the engine VM.
    pub fn tasks(&self) -> usize {
        self.current.vm.tasks()
    }
}

impl Drop for ScriptDomain {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Builds the engine VM of `principal` on this thread, with the `jobs` API installed and the
/// failures of its unawaited tasks going to `reports`.
fn engine_vm(
    principal: &Arc<PrincipalCell>,
    pool: &Pool,
    reports: &Rc<RefCell<reports::Reports>>,
) -> Result<Vm> {
    let sink = reports.clone();
    let reporter: vm::Reporter = Box::new(move |label: &str, failure: &TaskFailure| {
        sink.borrow_mut().push(Report {
            source: label.to_owned(),
            message: failure.to_string(),
        });
    });
    let home = JobsHome::new(principal.clone(), pool.shared().clone(), HomeKind::Engine);
    let vm = Vm::build(&principal.plan, reporter, MAX_DEADLINE, |lua| {
        jobs::install(lua, home)
    })
    .map_err(|e| Error::Vm(vm::error_message(&e)))?;
    vm.set_authority(principal.authority.clone());
    Ok(vm)
}

/// Where a registered job's failures go: the domain's reports.
fn report_sink(reports: &Rc<RefCell<reports::Reports>>) -> jobs::FailureSink {
    let sink = reports.clone();
    Rc::new(move |source, message| sink.borrow_mut().push(Report { source, message }))
}

fn display_name(path: &Path) -> String {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    path.strip_prefix(&cwd)
        .unwrap_or(path)
        .display()
        .to_string()
}
