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
//! `ScriptDomain` is a thin facade: each of its fields is a part that owns its own state and
//! states its invariants in its module doc, and each method puts parts together in a few lines.
//! Its methods live in three files: this one (the struct, [`ScriptDomain::new`], the
//! accessors and what the host reads back: reports, stats, interfaces), `facade_run.rs`
//! (scripts, generations, the pump, events, host dispatch) and `facade_frame.rs` (frames,
//! phases, `run_frames`, `stop`, engine services). The parts and the rest, by concern:
//!
//! | where | what |
//! | --- | --- |
//! | `spec.rs` | [`DomainSpec`], the settings `new` checks |
//! | `generation/` | `GenerationState`, what one generation owns: building the next one, ending one, the load step, host promises, owned resources |
//! | `lifecycle.rs` | `Lifecycle`, what outlives generations: the state, generation numbers, ended generations' mailboxes |
//! | `events/` | the mailbox and its drain, `EventHandlers` (named-event handlers, routes, the event queue's drain), `emit` |
//! | `frame/` | `FrameDriver` (`driver.rs`): `frame`'s and `advance`'s steps, contexts, phase handlers and their scheduler (`phases.rs`), the frame's join, engine services |
//! | `pump.rs`, `run_frames.rs` | a pump round's steps, `run_until_idle`'s checks and its stall verdict (`stall_watch.rs`); the frame loop's steps |
//! | `scripts.rs`, `script_handle.rs`, `host_dispatch.rs` | main scripts, `exec`, `eval` and the handle `run_file` answers; host dispatch and keys |
//! | `reporting.rs`, `reports.rs`, `sinks.rs`, `domain_stats.rs` | `Reporting`, what the host reads back: reports, script failures, diagnostics and counters; profile events; stats |
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
use crate::jobs::{Pool, RegisteredJobs};
use crate::ledger::Ledger;
use crate::principal::event_queue::EventQueue;
use crate::principal::{capability, profile};
use crate::principal::{DomainId, Generation, Principal};

pub(crate) mod actor;
mod builtin_modules;
mod chrome_trace;
mod domain_stats;
mod events;
mod facade_frame;
mod facade_run;
mod frame;
pub(crate) mod fs;
mod generation;
pub(crate) mod host_dispatch;
mod interfaces;
mod interrupt;
mod lifecycle;
pub(crate) mod log_api;
mod pump;
mod reporting;
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
pub use domain_stats::DomainStats;
use events::handlers::EventHandlers;
pub use events::mailbox::DomainMailbox;
pub use frame::call_reports::EventReport;
pub use frame::call_reports::StillWaiting;
pub use frame::call_reports::{AdvanceReport, HandlerTiming, PhaseReport};
pub use frame::context::{ContextSpec, FixedStep};
use frame::driver::FrameDriver;
pub use frame::engine_services::FrameReport;
pub use frame::service_error::ServiceError;
use generation::assemble::{report_sink, EngineSetup};
pub use generation::load::Load;
use generation::owned::OwnedResources;
pub use generation::owned::{ResourceId, ResourceOwner};
use generation::GenerationState;
pub use interfaces::{InterfaceField, InterfaceInfo};
pub use interrupt::InterruptHandle;
use interrupt::InterruptTarget;
pub use lifecycle::DomainState;
use lifecycle::Lifecycle;
pub use pump::PumpReport;
use reporting::Reporting;
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
    /// Declared before `current`: when the domain holds the pool's last handle, the pool's
    /// threads stop before the last generation's engine VM drops.
    pool: Pool,
    /// What the current generation owns; a restart or reload replaces it whole.
    current: GenerationState,
    /// What outlives generations: the state, generation numbers, stale mailboxes, owned
    /// resources, the interrupt target, and (declared after `current`) the VMs' hold on the
    /// pool's budget.
    life: Lifecycle,
    /// Handlers bound to event names, routes, and the event queue's engine-side state.
    event_handlers: Rc<EventHandlers>,
    /// The frame-to-frame state: fixed step, frame time, engine services, the entry running.
    frames: FrameDriver,
    /// Reports, script failures, the diagnostic sink and the counters: what the host reads back.
    reporting: Reporting,
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
        let bindings = frame::bindings::Bindings::new(spec.contexts.clone(), &spec.grant)?;
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
        let reporting = Reporting::new(spec.diagnostics.0.clone());
        let reports = reporting.reports();
        let event_handlers = EventHandlers::new(queue, &spec.name, id.domain, &bindings);
        let registry = RegisteredJobs::new(
            principal.clone(),
            pool.shared().clone(),
            report_sink(reports),
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
            reports,
            event_handlers: &event_handlers,
            domain_name: &spec.name,
            interrupt: &interrupt,
        };
        let current = GenerationState::assemble(&host, principal, rx, registry, bindings, actors)?;
        let domain = ScriptDomain {
            life: Lifecycle {
                state: Rc::new(Cell::new(DomainState::Ready)),
                last_generation: Cell::new(id.generation),
                load_bound: spec.load_bound,
                owned: OwnedResources::new(id.generation),
                interrupt,
                stale_rx: RefCell::new(Vec::new()),
                stale: Cell::new(0),
                _vms: vms,
            },
            name: spec.name,
            pool: pool.clone(),
            current,
            event_handlers,
            frames: FrameDriver::new(spec.fixed_step, spec.frame_budget),
            reporting,
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

    /// Takes the failures of the domain's workers, oldest first, as each happens. Each reaches
    /// the domain's code once through `Worker:receive`; one that no code received or joined is
    /// also in [`take_reports`](Self::take_reports), as text, once the run ends.
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

    /// The interfaces the scripts of the current generation composed with
    /// `@skein/interfaces`, sorted by name, each with its fields (sorted) and who provided
    /// each one: what an editor shows of how the packages fit together. A restart starts
    /// with none.
    ///
    /// ```
    /// use skein::interface::InterfaceField;
    /// use skein::lifecycle::Load;
    /// use skein::{DomainSpec, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let mut domain = ScriptDomain::new(&pool, DomainSpec::new("game"))?;
    /// domain.exec(r#"
    ///     local interfaces = require("@skein/interfaces")
    ///     interfaces.provide("ui.hud", { show = function() end })
    ///     interfaces.provide("ui.hud", { hide = function() end })
    /// "#)?;
    /// let hud = &domain.interfaces()[0];
    /// assert_eq!(hud.name, "ui.hud");
    /// let fields: Vec<&str> = hud.fields.iter().map(|f| f.name.as_str()).collect();
    /// assert_eq!(fields, ["hide", "show"]);
    /// assert_eq!(hud.fields[0].provider, "chunk 'exec'");
    /// domain.restart(Load::Nothing)?;
    /// assert!(domain.interfaces().is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn interfaces(&self) -> Vec<InterfaceInfo> {
        interfaces::infos(&self.current.vm.lua)
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
        self.life.interrupt.engine_token()
    }

    /// The longest one run of the domain's code may take (its spec's run deadline).
    pub(crate) fn run_deadline(&self) -> Duration {
        self.current.principal.max_deadline
    }

    /// The domain's counters now: cheap enough to call every frame (nothing is copied but the
    /// numbers), for an editor panel or a server's metrics.
    ///
    /// ```
    /// use skein::lifecycle::DomainState;
    /// use skein::{DomainSpec, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let domain = ScriptDomain::new(&pool, DomainSpec::new("game"))?;
    /// domain.exec(r#"
    ///     local events = require("@skein/events")
    ///     events.on("hit", function() end)
    ///     events.emit("hit", 1)
    ///     events.emit("miss", 2)
    /// "#)?;
    /// assert_eq!(domain.stats().events_pending, 2);
    /// domain.drain_events();
    /// let stats = domain.stats();
    /// assert_eq!((stats.events_delivered, stats.events_unhandled), (1, 1));
    /// assert_eq!(stats.handler_calls, 1);
    /// assert_eq!(stats.state, DomainState::Running);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stats(&self) -> DomainStats {
        let totals = self.reporting.counters.totals();
        let engine_native = crate::vm::native_used_by(&self.current.vm.lua);
        let (events_pending, events_pending_bytes) = self.event_handlers.queue().pending();
        DomainStats {
            generation: self.generation(),
            state: self.state(),
            frames: self.frames(),
            tasks: self.tasks(),
            contexts: self.contexts().len(),
            handler_calls: totals.handler_calls,
            events_delivered: totals.events_delivered,
            events_unhandled: totals.events_unhandled,
            events_dropped_at_stop: totals.events_dropped_at_stop,
            events_pending,
            events_pending_bytes,
            stale_events: self.stale_events(),
            denials: self.denials(),
            errors: totals.errors,
            warnings: totals.warnings,
            reports_waiting: self.reporting.waiting(),
            live_actors: self.live_actors().get(),
            owned_resources: self.owned_count(),
            registered_jobs: self.current.registry.len(),
            job_bytes: {
                // Promises whose handles were collected give their jobs' charges back.
                self.current.vm.free_collected_promises();
                self.current.principal.job_bytes.held()
            },
            shared_bytes: self.current.principal.shared.bytes(),
            engine_native_modules: engine_native.modules,
            engine_native_code_bytes: engine_native.code,
        }
    }

    /// Takes the failures no code awaited (main scripts, `exec` chunks, tasks, handlers and
    /// registered jobs that raised, jobs whose promise nobody awaited) and the capability
    /// denials (source `capability`), oldest first within each. Each frame's and advance's
    /// result holds copies of the reports made during it.
    pub fn take_reports(&self) -> Vec<Report> {
        let denials = self.current.principal.authority.denials().take();
        reports::with_denials(self.reporting.take(), denials)
    }

    /// How many capability checks the domain's code failed, in every VM and generation.
    pub fn denials(&self) -> u64 {
        self.current.principal.authority.denials().count()
    }

    /// Reports the failures no code observed (see [`reports::keep_unobserved`]): at the end of a
    /// run no task is left that could still observe them.
    pub(crate) fn report_unobserved_failures(&self) {
        let mut reports = self.reporting.reports().borrow_mut();
        reports::keep_unobserved(&self.current.vm, &self.current.actors, &mut reports);
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
        let principal = &self.current.principal;
        sinks::profile_engine(
            principal,
            &self.name,
            kind,
            context,
            name,
            started,
            queue_delay,
        );
    }
}

impl Drop for ScriptDomain {
    fn drop(&mut self) {
        self.stop();
    }
}
