//! `ScriptDomain`: an isolated Luau authority living on its engine thread.
//!
//! A domain is two things: what the host owns and keeps for the domain's whole life (its name,
//! pool handle, engine services, contexts and fixed step, sinks, reports, event queue and
//! routes: the fields of [`ScriptDomain`]), and what one *generation* owns (its principal,
//! engine VM, mailbox receiver, registered jobs, handler bindings, actors and host promises:
//! one `GenerationState` value, which a restart or reload replaces whole). It is `!Send`: it
//! lives on the thread that made it, and other threads reach it only through its
//! [`DomainMailbox`]. Pumping the domain drains the mailbox (settling promises homed in the
//! engine VM), then resumes the tasks that became ready.
//!
//! This file holds the struct, [`ScriptDomain::new`] and the plain accessors. The rest, by
//! concern:
//!
//! | where | what |
//! | --- | --- |
//! | `spec.rs` | [`DomainSpec`], the settings `new` checks |
//! | `generation/` | the generation value, restart, the load step, reload, host promises, owned resources |
//! | `events/` | the mailbox, its drain, named-event handlers and routes, `emit` |
//! | `frame/` | `frame` and registered-job phases, contexts, phase handlers (`phases.rs`), engine services |
//! | `pump.rs` | `pump`, the blocking round, `run_until_idle` and its stall verdict (`stall_watch.rs`) |
//! | `scripts.rs`, `script_handle.rs`, `host_dispatch.rs` | main scripts, `exec`, `eval` and the handle `run_file` answers; host dispatch and keys |
//! | `reports.rs`, `sinks.rs`, `domain_stats.rs`, `lifecycle.rs` | what the host reads back: reports, diagnostics and profile events, stats, state |
//! | `interrupt.rs` | [`InterruptHandle`]: a domain's running work stopped from another thread |
//! | `actor/`, `interfaces.rs`, `fs.rs`, `log_api.rs` | `@skein/worker`, `@skein/interfaces`, `@skein/fs`, `@skein/log` |

use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mlua::Lua;

use crate::error::Result;
use crate::jobs::{MailboxReceiver, Pool, Registry};
use crate::ledger::{Charge, Ledger};
use crate::principal::event_queue::EventQueue;
use crate::principal::{capability, diagnostic, profile};
use crate::principal::{DomainId, Generation, Principal};
use crate::vm::Owner;

pub(crate) mod actor;
mod builtin_modules;
mod chrome_trace;
mod domain_stats;
mod events;
mod frame;
pub(crate) mod fs;
mod generation;
pub(crate) mod host_dispatch;
mod interfaces;
mod interrupt;
mod lifecycle;
pub(crate) mod log_api;
mod pump;
mod reports;
mod run_frames;
mod script_file;
mod script_handle;
mod scripts;
mod sinks;
mod spec;
mod stall_watch;
#[cfg(feature = "tracing")]
mod tracing_sink;

use actor::Actors;
pub use actor::{ActorError, ActorStage, FailurePolicy, LiveActors, ACTOR_SPAWN};
pub use chrome_trace::ChromeTrace;
use domain_stats::Counters;
pub use domain_stats::DomainStats;
use events::handlers::EventHandlers;
pub use events::handlers::EventReport;
pub use events::mailbox::DomainMailbox;
pub use frame::context::{ContextSpec, FixedStep};
use frame::engine_services::EngineServices;
pub use frame::engine_services::FrameReport;
pub use frame::join::StillWaiting;
use frame::phases;
pub use frame::phases::{AdvanceReport, HandlerTiming, PhaseReport};
pub use generation::load::Load;
use generation::owned::OwnedResources;
pub use generation::owned::{ResourceId, ResourceOwner};
use generation::{report_sink, EngineSetup, GenerationState};
pub use interfaces::{InterfaceField, InterfaceInfo};
pub use interrupt::InterruptHandle;
use interrupt::InterruptTarget;
pub use lifecycle::DomainState;
pub use pump::PumpReport;
use reports::Reports;
pub use reports::{Report, ReportKind};
pub use script_handle::{ScriptHandle, ScriptStatus};
pub use spec::DomainSpec;
#[cfg(feature = "tracing")]
pub use tracing_sink::TracingSink;

static NEXT_DOMAIN: AtomicU64 = AtomicU64::new(1);

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
    owned: Rc<OwnedResources>,
    /// The highest generation number handed out: the current one, or a later reload
    /// candidate's that was discarded.
    last_generation: Cell<Generation>,
    /// How long a restart's or reload's load may take.
    load_bound: Duration,
    /// Declared before `current`, so a dropped domain lets go of its pool handle before its
    /// last generation's engine VM, the order it has always dropped in.
    pool: Pool,
    /// What the current generation owns; a restart or reload replaces it whole.
    current: GenerationState,
    /// What an [`InterruptHandle`] stops from another thread: kept on the current generation.
    interrupt: Arc<InterruptTarget>,
    /// The mailboxes of ended generations, drained into `stale` until their last sender goes.
    stale_rx: RefCell<Vec<MailboxReceiver>>,
    /// Events of ended generations that arrived and were discarded unapplied.
    stale: Cell<u64>,
    reports: Rc<RefCell<Reports>>,
    /// Failures of scripts the host started: `run_until_idle` answers the first.
    failures: Rc<RefCell<Vec<String>>>,
    /// The host's engine services and this frame's counts.
    services: Rc<EngineServices>,
    /// The sum of the `dt` given to [`frame`](Self::frame).
    frame_time: Cell<Duration>,
    /// Where the domain is in its life; shared with the completion of a loading script.
    state: Rc<Cell<DomainState>>,
    /// The scheduler entry running now, if any: a second one is `Reentrant`.
    busy: Cell<Option<&'static str>>,
    fixed_step: FixedStep,
    /// The longest an advance or a phase waits for the pool work its handlers await.
    frame_budget: Duration,
    /// Time `advance` was given that has not made a whole fixed step yet.
    accumulator: Cell<Duration>,
    /// Handlers bound to event names, routes, and the event queue's engine-side state.
    event_handlers: Rc<EventHandlers>,
    /// When `run_until_idle` last ran the registered jobs: they run at most once per frame
    /// interval there (`pump::FRAME_INTERVAL`).
    jobs_ran: Cell<Option<Instant>>,
    /// Where every diagnostic goes as it is made, if anywhere.
    diagnostics: diagnostic::Diagnostics,
    /// Running totals for [`stats`](Self::stats).
    counters: Counters,
    /// The owner of the last handler call, kept when that call ended in its first run and
    /// nothing else held it: the next call refills it instead of allocating one.
    spare_owner: Cell<Option<Rc<Owner>>>,
    /// The memory limits of the domain's VMs, held on the pool's budget while it lives.
    _vms: Charge,
    _engine_thread: PhantomData<Rc<()>>,
}

impl ScriptDomain {
    /// Makes a domain served by `pool`, building its engine VM on this thread.
    ///
    /// The domain is [`Ready`](DomainState::Ready) when this returns.
    ///
    /// # Errors
    /// [`Error::Vm`](crate::Error::Vm) when the plan's VM cannot be built;
    /// [`Error::Spec`](crate::Error::Spec) naming the [`SpecSetting`](crate::refusal::SpecSetting) when
    /// the spec's fixed step is zero, its event limits' `per_drain` or `name` is, or its worker
    /// budget, run deadline or load bound is zero or past [`MAX_DEADLINE`](crate::job::JobOptions::MAX_DEADLINE);
    /// [`Error::OverDelegation`](crate::Error::OverDelegation) when a context asks for capabilities the
    /// spec's grant does not hold (naming `context '<name>'` and what it lacks).
    pub fn new(pool: &Pool, spec: DomainSpec) -> Result<ScriptDomain> {
        let started = Instant::now();
        spec.check()?;
        let bindings = phases::Bindings::new(spec.contexts.clone(), &spec.grant)?;
        let id = Principal {
            domain: DomainId(NEXT_DOMAIN.fetch_add(1, Ordering::Relaxed)),
            generation: Generation(1),
        };
        let queue = EventQueue::new(spec.event_limits, id.generation);
        let (mailbox, rx) = DomainMailbox::new(queue.clone(), id.generation);
        let vms = pool.reserve_vms(
            &format!("domain '{}'", spec.name),
            pool.threads() + 1,
            spec.plan.memory_limit_bytes(),
            "its engine VM and one per worker",
        )?;
        let memory = Arc::new(Ledger::named(
            format!("the host memory of domain '{}'", spec.name),
            spec.host_memory,
            Some(pool.memory().clone()),
        ));
        let principal = Arc::new(spec.first_principal(id, &mailbox, memory));
        let reports = Rc::new(RefCell::new(Reports::default()));
        let event_handlers = EventHandlers::new(queue, &spec.name, id.domain, &bindings);
        let registry = Registry::new(
            principal.clone(),
            pool.shared().clone(),
            report_sink(&reports),
        );
        let actors = Actors::new(
            principal.clone(),
            pool.shared().clone(),
            pool.memory().clone(),
            spec.actor_failures,
            spec.actor_budget,
        );
        let interrupt = InterruptTarget::new(&spec.name, pool.shared().clone(), principal.clone());
        let host = EngineSetup {
            pool,
            reports: &reports,
            event_handlers: &event_handlers,
            domain_name: &spec.name,
            interrupt: &interrupt,
        };
        let current = GenerationState::assemble(&host, principal, rx, registry, bindings, actors)?;
        let domain = ScriptDomain {
            owned: OwnedResources::new(id.generation),
            last_generation: Cell::new(id.generation),
            load_bound: spec.load_bound,
            name: spec.name,
            pool: pool.clone(),
            current,
            interrupt,
            stale_rx: RefCell::new(Vec::new()),
            stale: Cell::new(0),
            reports,
            failures: Rc::new(RefCell::new(Vec::new())),
            services: Rc::new(EngineServices::default()),
            frame_time: Cell::new(Duration::ZERO),
            state: Rc::new(Cell::new(DomainState::Ready)),
            busy: Cell::new(None),
            fixed_step: spec.fixed_step,
            frame_budget: spec.frame_budget,
            accumulator: Cell::new(Duration::ZERO),
            jobs_ran: Cell::new(None),
            event_handlers,
            diagnostics: spec.diagnostics.0,
            counters: Counters::default(),
            spare_owner: Cell::new(None),
            _vms: vms,
            _engine_thread: PhantomData,
        };
        domain.profiled(profile::ProfileKind::DomainCreated, None, None, started);
        Ok(domain)
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
        DomainMailbox::of(&self.current.principal)
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

    /// What the domain's code may do.
    pub fn grant(&self) -> &capability::Grant {
        self.current.principal.authority.grant()
    }

    /// Takes the failures the domain's workers reported, oldest first. Each is also in
    /// [`take_reports`](Self::take_reports) as text, and reaches the domain's code once
    /// through `Worker:receive`.
    pub fn take_actor_failures(&self) -> Vec<ActorError> {
        self.current.actors.take_failures()
    }

    /// A count of the domain's worker threads still alive, which outlives the domain: after
    /// a stop or a drop it reads 0. Not part of the stable surface.
    #[doc(hidden)]
    pub fn live_actors(&self) -> LiveActors {
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

    /// The current generation's authority (the domain's grant), for code of a layer above
    /// that runs the engine VM's functions as the domain (a resource's export).
    pub(crate) fn engine_authority(&self) -> &Arc<capability::Authority> {
        &self.current.principal.authority
    }

    /// The token every engine VM of the domain runs with, set by an
    /// [`InterruptHandle`]: code of a layer above that runs the engine VM's functions (a
    /// resource's export) runs with it, so an interrupt stops that too.
    pub(crate) fn engine_halt(&self) -> Arc<crate::vm::budget::CancelToken> {
        self.interrupt.engine_token()
    }

    /// The longest one run of the domain's code may take (its spec's run deadline).
    pub(crate) fn run_deadline(&self) -> Duration {
        self.current.principal.max_deadline
    }
}

impl Drop for ScriptDomain {
    fn drop(&mut self) {
        self.stop();
    }
}
