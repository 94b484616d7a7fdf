//! How a host asks for a domain: [`DomainSpec`], the settings [`ScriptDomain::new`] checks and
//! builds the domain from. A spec is plain data; it holds no VM and names no generation.

use std::sync::Arc;
use std::time::Duration;

use crate::domain::actor::{MAX_ACTOR_BYTES, MAX_LIVE_ACTORS};
use crate::domain::builtin_modules::with_builtins;
use crate::domain::generation::load;
use crate::domain::{ContextSpec, DomainMailbox, FailurePolicy, FixedStep, ScriptDomain};
use crate::error::{Error, Result, SpecSetting};
use crate::jobs::{
    self, PrincipalShared, EVENT_LOG_BOUND, JOB_WEIGHT, MAX_DEADLINE, MAX_JOB_BYTES, WARM_BOUND,
};
use crate::ledger::Ledger;
use crate::principal::capability;
use crate::principal::diagnostic::DiagnosticSlot;
use crate::principal::profile::ProfileSlot;
use crate::principal::{DiagnosticSink, EventLimits, LogSink, LogSlot, Principal, ProfileSink};
use crate::vm::STALL_HORIZON;
use crate::vm::{self, Plan};

/// How to make a [`ScriptDomain`].
///
/// ```
/// use skein::{DomainSpec, Plan};
/// let spec = DomainSpec::new("editor").plan(Plan::new().memory_limit(128 << 20));
/// assert_eq!(spec.name(), "editor");
/// ```
#[derive(Clone, Debug)]
pub struct DomainSpec {
    pub(crate) name: String,
    pub(crate) plan: Plan,
    pub(crate) warm_bound: Duration,
    pub(crate) contexts: Vec<ContextSpec>,
    pub(crate) fixed_step: FixedStep,
    pub(crate) grant: capability::Grant,
    pub(crate) event_limits: EventLimits,
    pub(crate) actor_failures: FailurePolicy,
    pub(crate) actor_budget: Duration,
    pub(crate) run_deadline: Duration,
    pub(crate) load_bound: Duration,
    pub(crate) frame_budget: Duration,
    pub(crate) host_memory: usize,
    pub(crate) profile: ProfileSlot,
    pub(crate) logs: LogSlot,
    pub(crate) diagnostics: DiagnosticSlot,
    pub(crate) detect_stalls: bool,
}

impl DomainSpec {
    /// How many engine events (`ScriptDomain::raise_engine_event`) the log a generation's VMs read from holds: 4,096; a VM that has not reached a start point for more than that misses the oldest.
    pub const EVENT_LOG_BOUND: usize = EVENT_LOG_BOUND;

    /// How long one `jobs.warm` entry may take, waits included, unless [`warm_bound`](Self::warm_bound) says otherwise: 60 s.
    pub const DEFAULT_WARM_BOUND: Duration = WARM_BOUND;

    /// What one job weighs against [`MAX_JOB_BYTES`](Self::MAX_JOB_BYTES) besides its arguments and result: 256 bytes.
    pub const JOB_WEIGHT: usize = JOB_WEIGHT;

    /// How much the jobs a domain's generation has in flight may weigh together (arguments while queued, [`JOB_WEIGHT`](Self::JOB_WEIGHT) and the result until the promise is collected): 256 MiB. A dispatch past it is refused at the call.
    pub const MAX_JOB_BYTES: usize = MAX_JOB_BYTES;

    /// How much the messages waiting for one actor's handler and for its domain may weigh together: 64 MiB.
    pub const MAX_ACTOR_BYTES: usize = MAX_ACTOR_BYTES;

    /// How many `@skein/worker` actors one domain may have alive at once, over all its generations: 64.
    pub const MAX_LIVE_ACTORS: usize = MAX_LIVE_ACTORS;

    /// The longest wait a stall check ([`detect_stalls`](Self::detect_stalls)) counts as ever ending: a timer due later than a day is counted as never coming due.
    pub const STALL_HORIZON: Duration = STALL_HORIZON;

    /// How long a load may take, waits included, unless [`load_bound`](Self::load_bound) says otherwise: 30 s.
    pub const DEFAULT_LOAD_BOUND: Duration = load::LOAD_BOUND;

    /// The longest an advance waits for the pool work its handlers await, unless [`frame_budget`](Self::frame_budget) says otherwise: 16 ms, one frame at 60 Hz.
    pub const DEFAULT_FRAME_BUDGET: Duration = Duration::from_millis(16);

    /// How much host memory a domain's scripts may make Skein hold, unless
    /// [`host_memory`](Self::host_memory) says otherwise: 512 MiB.
    pub const DEFAULT_HOST_MEMORY: usize = 512 << 20;

    /// The least host memory a domain may be given: 1 MiB.
    pub const MIN_HOST_MEMORY: usize = 1 << 20;

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
            actor_failures: FailurePolicy::Stop,
            actor_budget: MAX_DEADLINE,
            run_deadline: MAX_DEADLINE,
            load_bound: load::LOAD_BOUND,
            frame_budget: Self::DEFAULT_FRAME_BUDGET,
            host_memory: Self::DEFAULT_HOST_MEMORY,
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
    /// [`STALL_HORIZON`](crate::DomainSpec::STALL_HORIZON) (a day): a longer wait, such as
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
    /// event (see [`ProfileKind`](crate::profile::ProfileKind)). A restart keeps the sink. Without one nothing is measured.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use skein::profile::ChromeTrace;
    /// use skein::DomainSpec;
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

    /// Sends every [`Diagnostic`](crate::diagnostic::Diagnostic) the domain makes to `sink` as it is made (see
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
    /// use skein::event::EventLimits;
    /// use skein::DomainSpec;
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
    /// declared already, or the budget is zero or longer than [`MAX_DEADLINE`](crate::job::JobOptions::MAX_DEADLINE).
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
    /// [`require_capability`](crate::capability::require_capability) is denied.
    pub fn grant(mut self, grant: capability::Grant) -> DomainSpec {
        self.grant = grant;
        self
    }

    /// Sets what the domain's workers (`@skein/worker`) do after their handler fails on a
    /// message: [`FailurePolicy::Stop`] (the default) or [`FailurePolicy::Continue`]. Every
    /// failure is reported either way, and none fails the domain. Scripts can't choose it.
    ///
    /// ```
    /// use skein::actor::FailurePolicy;
    /// use skein::DomainSpec;
    /// let spec = DomainSpec::new("tools").actor_failures(FailurePolicy::Continue);
    /// assert_eq!(spec.actor_failure_policy(), FailurePolicy::Continue);
    /// ```
    pub fn actor_failures(mut self, policy: FailurePolicy) -> DomainSpec {
        self.actor_failures = policy;
        self
    }

    /// Sets the budget of one run of a worker's handler (from a resume to its next yield or
    /// return): by default, and at most, [`MAX_DEADLINE`](crate::job::JobOptions::MAX_DEADLINE) (60 s). A handler that runs past it
    /// fails at the `handler` stage, as a failure of its own code would.
    ///
    /// ```
    /// use std::time::Duration;
    /// use skein::{DomainSpec, Pool, ScriptDomain};
    /// let spec = DomainSpec::new("tools").actor_budget(Duration::from_millis(250));
    /// assert_eq!(spec.actor_run_budget(), Duration::from_millis(250));
    /// let zero = ScriptDomain::new(&Pool::new(1), DomainSpec::new("z").actor_budget(Duration::ZERO));
    /// assert_eq!(zero.err().unwrap().to_string(), "worker budget: must be more than zero and at most 60 s");
    /// ```
    pub fn actor_budget(mut self, budget: Duration) -> DomainSpec {
        self.actor_budget = budget;
        self
    }

    /// Sets the longest one run of the domain's code may take (from a resume to its next yield
    /// or return): its engine tasks, and its jobs, whose `opts.deadline` may not ask for more.
    /// By default, and at most, [`MAX_DEADLINE`](crate::job::JobOptions::MAX_DEADLINE) (60 s). A host that runs scripts it does not
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
    /// [`LOAD_BOUND`](crate::DomainSpec::DEFAULT_LOAD_BOUND) (30 s), at most [`MAX_DEADLINE`](crate::job::JobOptions::MAX_DEADLINE) (60 s).
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

    /// Sets the frame budget: the longest one [`advance`](ScriptDomain::advance) (or
    /// [`run_phase`](ScriptDomain::run_phase)) waits, over all its phases, for the pool work
    /// its handlers await, so that they resume in the frame that started it. By default
    /// [`DEFAULT_FRAME_BUDGET`](Self::DEFAULT_FRAME_BUDGET) (16 ms); zero never waits; at most
    /// [`MAX_DEADLINE`](crate::job::JobOptions::MAX_DEADLINE) (60 s). A handler still waiting when it
    /// runs out goes on in a later frame and is named in
    /// [`AdvanceReport::still_waiting`](crate::frame::AdvanceReport::still_waiting).
    /// [`advance_within`](ScriptDomain::advance_within) sets it for one call.
    ///
    /// ```
    /// use std::time::Duration;
    /// use skein::{DomainSpec, Pool, ScriptDomain};
    /// let spec = DomainSpec::new("game").frame_budget(Duration::from_millis(8));
    /// assert_eq!(spec.get_frame_budget(), Duration::from_millis(8));
    /// let long = ScriptDomain::new(&Pool::new(1), DomainSpec::new("g").frame_budget(Duration::from_secs(61)));
    /// assert_eq!(long.err().unwrap().to_string(), "frame budget: must be at most 60 s");
    /// ```
    pub fn frame_budget(mut self, budget: Duration) -> DomainSpec {
        self.frame_budget = budget;
        self
    }

    /// The longest an advance waits for its handlers' pool work.
    pub fn get_frame_budget(&self) -> Duration {
        self.frame_budget
    }

    /// Sets the domain's host memory: how many bytes Skein may hold outside the domain's VMs
    /// because of its scripts, over all its generations. Its jobs' arguments and results, its
    /// shared tables and queues, its actors' messages, the texts of its failures and reports
    /// and its log lines are each charged to it before they are made, and refused at the call
    /// that asked once it is full. It is drawn from the pool's memory budget too
    /// ([`Pool::memory_budget`](crate::Pool::memory_budget)), so a pool's domains together
    /// never hold more than that. By default [`DEFAULT_HOST_MEMORY`](Self::DEFAULT_HOST_MEMORY)
    /// (512 MiB); at least [`MIN_HOST_MEMORY`](Self::MIN_HOST_MEMORY) (1 MiB).
    ///
    /// ```
    /// use skein::{DomainSpec, Pool, ScriptDomain};
    /// let spec = DomainSpec::new("mod").host_memory(64 << 20);
    /// assert_eq!(spec.get_host_memory(), 64 << 20);
    /// let tiny = ScriptDomain::new(&Pool::new(1), DomainSpec::new("m").host_memory(1000));
    /// assert_eq!(tiny.err().unwrap().to_string(), "host memory: must be at least 1 MiB");
    /// ```
    pub fn host_memory(mut self, bytes: usize) -> DomainSpec {
        self.host_memory = bytes;
        self
    }

    /// The domain's host memory.
    pub fn get_host_memory(&self) -> usize {
        self.host_memory
    }

    /// The budget of one run of a worker's handler.
    pub fn actor_run_budget(&self) -> Duration {
        self.actor_budget
    }

    /// What the domain's workers do after a handler failure.
    pub fn actor_failure_policy(&self) -> FailurePolicy {
        self.actor_failures
    }

    /// Grants the domain a part of `parent`'s grant: `wanted`, which must be a subset of what
    /// `parent` holds (the file-system roots of a kept `filesystem.read` / `filesystem.write`
    /// are the parent's). Authority only shrinks on the way to a child domain; a later
    /// [`grant`](Self::grant) replaces this one, as the host's [`RootAuthority`] can always do.
    ///
    /// ```
    /// use skein::capability::{CapabilityId, CapabilitySet, RootAuthority};
    /// use skein::{DomainSpec, Pool, ScriptDomain};
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
    /// [`RootAuthority`]: crate::capability::RootAuthority
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

    /// Shortens the bound on one `jobs.warm` entry's run ([`WARM_BOUND`](crate::DomainSpec::DEFAULT_WARM_BOUND)),
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

impl DomainSpec {
    /// Checks the settings [`ScriptDomain::new`] refuses before it builds anything.
    ///
    /// # Errors
    /// [`Error::Spec`] naming the [`SpecSetting`] that breaks its rule.
    pub(crate) fn check(&self) -> Result<()> {
        self.fixed_step.check()?;
        if self.event_limits.per_drain == 0 || self.event_limits.name == 0 {
            return Err(Error::Spec {
                setting: SpecSetting::EventLimits,
                message: "event_limits: per_drain and name must be at least 1".to_owned(),
            });
        }
        let bounded = [
            (self.actor_budget, SpecSetting::ActorBudget, "worker budget"),
            (self.run_deadline, SpecSetting::RunDeadline, "run deadline"),
            (self.load_bound, SpecSetting::LoadBound, "load bound"),
        ];
        if self.host_memory < Self::MIN_HOST_MEMORY {
            return Err(Error::Spec {
                setting: SpecSetting::HostMemory,
                message: "host memory: must be at least 1 MiB".to_owned(),
            });
        }
        if self.frame_budget > MAX_DEADLINE {
            return Err(Error::Spec {
                setting: SpecSetting::FrameBudget,
                message: format!(
                    "frame budget: must be at most {} s",
                    vm::format_seconds(MAX_DEADLINE)
                ),
            });
        }
        for (value, setting, what) in bounded {
            if value.is_zero() || value > MAX_DEADLINE {
                return Err(Error::Spec {
                    setting,
                    message: format!(
                        "{what}: must be more than zero and at most {} s",
                        vm::format_seconds(MAX_DEADLINE)
                    ),
                });
            }
        }
        Ok(())
    }

    /// The principal of the domain's first generation, `id`, posting through `mailbox`: the
    /// spec's plan, bounds and sinks, and an authority holding its grant, attributed to the
    /// domain.
    pub(crate) fn first_principal(
        &self,
        id: Principal,
        mailbox: &DomainMailbox,
        memory: Arc<Ledger>,
    ) -> PrincipalShared {
        let mut cell = PrincipalShared::new(
            id,
            with_builtins(&self.plan),
            mailbox.sender().clone(),
            mailbox.event_queue().clone(),
            self.run_deadline,
            self.warm_bound,
            memory,
        );
        cell.profile = self.profile.0.clone();
        cell.logs = self.logs.0.clone();
        cell.liveness = self.detect_stalls.then(Arc::default);
        cell.authority = Arc::new(capability::Authority::new(
            self.grant.clone(),
            capability::Attribution {
                domain_name: self.name.clone(),
                domain: id.domain,
                generation: id.generation,
                context: None,
                actor: None,
            },
            Arc::new(capability::DenialLog::new(
                cell.profile.clone(),
                self.diagnostics.0.clone(),
            )),
        ));
        cell
    }
}
