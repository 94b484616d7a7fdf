//! The scheduler of one domain: the handlers scripts bind to contexts (`@skein/context`,
//! [`Bindings`], a part of the generation), and the [`FrameDriver`]'s side of running them:
//! an advance's phases ([`FrameDriver::run_phases`]) and each phase's handler calls
//! ([`FrameDriver::run_handlers`], [`FrameDriver::call_task`]). The entry points
//! (`run_phase`, `advance`, `stop`) are [`ScriptDomain`](crate::ScriptDomain)'s.
//!
//! Every entry into a domain's phase handlers goes through here. Handlers run on the engine
//! thread, one after another, in a fixed order: contexts by priority (higher first), contexts of
//! equal priority in the order the host declared them, and a context's handlers for one phase in
//! the order scripts bound them. No hash map decides anything.
//!
//! Each handler call is a task of the engine VM whose runs are held to its context's budget
//! (the per-run deadline of `vm::budget`). A failure is recorded as a [`Diagnostic`] in the
//! phase's report and the next handler runs: one broken handler never stops the phase or the
//! domain.
//!
//! The scheduler does not nest: while a phase runs, a handler that reaches back into its own
//! domain's `run_phase` or `advance` (through a host service) is refused with
//! [`Error::Reentrant`](crate::Error::Reentrant) ([`FrameDriver::enter`]); its work belongs in
//! an event or a task for the next frame.
//!
//! The invariants of [`Bindings`]: each phase's handler list is in run order at all times (a
//! bind inserts in place, making a new list); a phase runs a snapshot, so what is bound while
//! it runs runs from its next run on; the context declarations and their checked grants
//! outlive generations, the handlers do not. Of the calls: a handler call's owner is fresh or
//! the driver's spare, never one something else still holds.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mlua::{Function, Lua, MultiValue, Table, Value};

use super::driver::FrameDriver;
use crate::domain::frame::context::ContextSpec;
use crate::domain::frame::handler_label::HandlerLabel;
use crate::domain::frame::join::{PhaseJoin, StillWaiting};
use crate::domain::generation::GenerationState;
use crate::domain::reporting::Reporting;
use crate::domain::reports::Reports;
use crate::domain::sinks::profile_engine;
use crate::domain::EventReport;
use crate::domain::{FrameReport, Report, ReportKind};
use crate::error::Result;
use crate::jobs::{PrincipalShared, MAX_DEADLINE};
use crate::principal::capability::{lacking, Authority, CapabilitySet, Grant};
use crate::principal::diagnostic::{defined_at, Diagnostic, DiagnosticKind, Severity};
use crate::principal::profile::ProfileKind;
use crate::principal::Generation;
use crate::principal::Phase;
use crate::value::Message;
use crate::vm::{self, FirstRun, Owner, OwnerIdentity, Vm};

/// Registry key of the engine VM's `@skein/context` table.
pub(crate) const CONTEXT_KEY: &str = "skein.context";

/// What `context.bind` raises outside the engine VM.
const WORKER_BIND: &str =
    "context.bind: handlers bind only in the engine VM; a worker VM runs jobs, not phases";

/// What one [`run_phase`](crate::ScriptDomain::run_phase) did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PhaseReport {
    /// The phase that ran.
    pub phase: Phase,
    /// How many handlers it called.
    pub calls: usize,
    /// Each call's context and wall time (to its return or first yield), in call order.
    pub timings: Vec<HandlerTiming>,
    /// The handlers that failed (raised, or ran past their context's budget), in call order.
    pub errors: Vec<Diagnostic>,
    /// How long the whole phase took, wall time, its join included.
    pub elapsed: Duration,
    /// How long the phase waited, after its last handler returned or yielded, for the pool
    /// work its handlers await (its join; zero when no handler awaited the pool).
    pub joined: Duration,
    /// The calls that still waited on pool work when the frame's budget ran out (see
    /// [`advance`](crate::ScriptDomain::advance)): they go on in a later frame.
    pub still_waiting: Vec<StillWaiting>,
}

/// How long one handler call took.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HandlerTiming {
    /// The handler's context.
    pub context: Arc<str>,
    /// From the call to its return, failure or first yield.
    pub elapsed: Duration,
}

/// What one [`advance`](crate::ScriptDomain::advance) did.
#[derive(Clone, Debug, PartialEq)]
pub struct AdvanceReport {
    /// How many `fixedUpdate` steps ran.
    pub fixed_steps: u32,
    /// How many owed steps were dropped because they passed the catch-up limit.
    pub dropped_steps: u64,
    /// Every phase run, in order: `startup` on the generation's first frame, the fixed steps,
    /// then `update`, then `lateUpdate`.
    pub phases: Vec<PhaseReport>,
    /// The event drain that followed `lateUpdate` (see
    /// [`drain_events`](crate::ScriptDomain::drain_events)).
    pub events: EventReport,
    /// The engine frame that ended the advance.
    pub frame: FrameReport,
    /// How long the advance took, wall time.
    pub elapsed: Duration,
    /// The reports made during the whole advance, its phases and its frame, oldest first:
    /// copies of what waits in [`take_reports`](crate::ScriptDomain::take_reports), as
    /// [`FrameReport::reports`] (which holds the frame's part) says.
    pub reports: Vec<Report>,
}

impl AdvanceReport {
    /// Every handler failure of the advance, in the order they happened.
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.phases.iter().flat_map(|p| p.errors.iter())
    }

    /// How long the advance's phases waited for their handlers' pool work, in all.
    pub fn joined(&self) -> Duration {
        self.phases.iter().map(|p| p.joined).sum()
    }

    /// Every handler call the advance joined that still waited on pool work when its frame
    /// budget ran out, in call order: each goes on in a later frame.
    pub fn still_waiting(&self) -> impl Iterator<Item = &StillWaiting> {
        self.phases.iter().flat_map(|p| p.still_waiting.iter())
    }
}

/// One handler a script bound.
#[derive(Clone)]
struct Binding {
    /// Index of its context in the declared list.
    context: usize,
    phase: Phase,
    handler: Function,
}

/// How many phases there are: one handler list each.
const PHASES: usize = Phase::ALL.len();

/// The host's context declarations and the handlers scripts bound to them, in bind order.
///
/// The declarations belong to the host and outlive generations; the handlers are functions of
/// one engine VM and are dropped with it ([`clear`](Self::clear)).
pub(crate) struct Bindings {
    contexts: Rc<[ContextSpec]>,
    /// The contexts' names, shared by every timing that names them.
    names: Box<[Arc<str>]>,
    /// Each context's place in run order: priority (higher first), then declaration order.
    rank: Box<[usize]>,
    /// Each phase's handlers, kept in run order as they are bound (a bind is rare, a phase
    /// runs every frame): by their context's rank, then bind order. A bind makes a new list,
    /// so a phase's snapshot of the old one is a reference count, not a copy.
    handlers: RefCell<[Rc<[Binding]>; PHASES]>,
    /// Each context's label for each phase (`context 'game' update handler`), at
    /// `context * PHASES + phase`: the owner identity every call of those handlers shares.
    labels: Box<[Arc<HandlerLabel>]>,
    /// Each context's part of the domain's grant, checked when the domain was made; `None`
    /// for a context that holds the whole grant.
    grants: Box<[Option<Grant>]>,
    /// The capabilities each context's handlers hold (its part, or the whole grant's): what
    /// code binding a handler to it must hold itself.
    held: Rc<[CapabilitySet]>,
    /// The contexts' authorities for one generation (made on first use, again after a restart):
    /// every call of a context's handlers shares one, so a call costs no allocation for it.
    authorities: RefCell<Option<(Generation, Vec<Arc<Authority>>)>>,
}

impl Bindings {
    /// Checks each context's capabilities against the domain's `grant` and keeps their parts.
    ///
    /// # Errors
    /// [`Error::OverDelegation`] for the first context (in declaration order) that asks for
    /// more than `grant`, naming it and what it lacks.
    ///
    /// [`Error::OverDelegation`]: crate::Error::OverDelegation
    pub(crate) fn new(contexts: Vec<ContextSpec>, grant: &Grant) -> Result<Rc<Bindings>> {
        let grants = contexts
            .iter()
            .map(|c| {
                c.get_capabilities()
                    .map(|wanted| grant.narrowed(&format!("context '{}'", c.name()), wanted))
                    .transpose()
            })
            .collect::<std::result::Result<Box<[_]>, _>>()?;
        let held = grants
            .iter()
            .map(|g| g.as_ref().unwrap_or(grant).capabilities().clone())
            .collect();
        let bindings = Bindings::unchecked(contexts);
        Ok(Rc::new(Bindings {
            grants,
            held,
            ..bindings
        }))
    }

    fn unchecked(contexts: Vec<ContextSpec>) -> Bindings {
        let n = contexts.len();
        let mut order: Vec<usize> = (0..contexts.len()).collect();
        // A stable sort keeps declaration order among equal priorities.
        order.sort_by_key(|&i| std::cmp::Reverse(contexts[i].get_priority()));
        let mut rank = vec![0; contexts.len()];
        for (place, &context) in order.iter().enumerate() {
            rank[context] = place;
        }
        let names: Box<[Arc<str>]> = contexts.iter().map(|c| Arc::from(c.name())).collect();
        let labels = names
            .iter()
            .flat_map(|context| {
                Phase::ALL.iter().map(|&phase| {
                    Arc::new(HandlerLabel::Phase {
                        context: context.clone(),
                        phase,
                    })
                })
            })
            .collect();
        Bindings {
            names,
            labels,
            contexts: contexts.into(),
            rank: rank.into(),
            handlers: RefCell::new(Default::default()),
            grants: vec![None; n].into(),
            held: vec![CapabilitySet::new(); n].into(),
            authorities: RefCell::new(None),
        }
    }

    /// The authority context `context`'s handlers run under in the generation `domain` belongs
    /// to: a part of the domain's, attributed to the context.
    pub(crate) fn authority(&self, context: usize, domain: &Authority) -> Arc<Authority> {
        let generation = domain.attribution().generation;
        let mut cache = self.authorities.borrow_mut();
        if cache.as_ref().map(|(g, _)| *g) != Some(generation) {
            let made = self
                .contexts
                .iter()
                .zip(self.grants.iter())
                .map(|(spec, grant)| {
                    let grant = grant.clone().unwrap_or_else(|| domain.grant().clone());
                    Arc::new(domain.narrowed(grant, Some(spec.name())))
                })
                .collect();
            *cache = Some((generation, made));
        }
        let (_, made) = cache.as_ref().expect("filled above");
        made[context].clone()
    }

    pub(crate) fn contexts(&self) -> &[ContextSpec] {
        &self.contexts
    }

    /// The capabilities each context's handlers hold, in declaration order.
    pub(crate) fn held(&self) -> Rc<[CapabilitySet]> {
        self.held.clone()
    }

    /// The bindings of a new generation: the host's contexts (and their checked grants), no
    /// handlers yet.
    pub(crate) fn next_generation(&self) -> Rc<Bindings> {
        Rc::new(Bindings {
            contexts: self.contexts.clone(),
            names: self.names.clone(),
            labels: self.labels.clone(),
            rank: self.rank.clone(),
            handlers: RefCell::new(Default::default()),
            grants: self.grants.clone(),
            held: self.held.clone(),
            authorities: RefCell::new(None),
        })
    }

    /// Drops every handler (the generation that bound them has ended).
    pub(crate) fn clear(&self) {
        let handlers: [Rc<[Binding]>; PHASES] = std::mem::take(&mut *self.handlers.borrow_mut());
        drop(handlers);
    }

    /// The handlers of `phase` in run order: a snapshot, so a handler bound while the phase
    /// runs is called from the phase's next run on.
    fn snapshot(&self, phase: Phase) -> Rc<[Binding]> {
        self.handlers.borrow()[phase as usize].clone()
    }

    /// The handlers of `phase` in run order, with their context's index.
    #[cfg(test)]
    fn due(&self, phase: Phase) -> Vec<(usize, Function)> {
        self.snapshot(phase)
            .iter()
            .map(|b| (b.context, b.handler.clone()))
            .collect()
    }

    /// The label of `context`'s handler for `phase`.
    fn label(&self, context: usize, phase: Phase) -> Arc<HandlerLabel> {
        self.labels[context * PHASES + phase as usize].clone()
    }

    /// The owner of one call of context `context`'s handler for `phase`, in the generation of
    /// `principal`: its label, its context's authority, and its context's budget per run (the
    /// principal's run deadline when the context sets none).
    fn call_owner(&self, context: usize, phase: Phase, principal: &PrincipalShared) -> Owner {
        let authority = self.authority(context, &principal.authority);
        let label = self.label(context, phase);
        let deadline = self.contexts[context]
            .get_budget()
            .unwrap_or(principal.max_deadline);
        handler_owner(label, deadline, Some(authority))
    }

    /// Adds a handler after every handler of its phase whose context runs before or with its
    /// context.
    fn insert(&self, binding: Binding) {
        let mut handlers = self.handlers.borrow_mut();
        let slot = &mut handlers[binding.phase as usize];
        let rank = self.rank[binding.context];
        let at = slot.partition_point(|b| self.rank[b.context] <= rank);
        let mut list = slot.to_vec();
        list.insert(at, binding);
        *slot = list.into();
    }

    /// `context.bind(name, handlers)`: checks every entry, then binds them all (or none).
    fn bind(&self, name: Value, handlers: Value) -> mlua::Result<()> {
        let Value::String(name) = name else {
            return Err(refuse(format!(
                "name must be a string, got {}",
                vm::a_type(&name)
            )));
        };
        let wanted = name.as_bytes();
        let Some(index) = self
            .contexts
            .iter()
            .position(|c| c.name().as_bytes() == &wanted[..])
        else {
            let declared: Vec<&str> = self.contexts.iter().map(ContextSpec::name).collect();
            let declared = if declared.is_empty() {
                "none".to_owned()
            } else {
                declared.join(", ")
            };
            return Err(refuse(format!(
                "no context named {} is declared (declared: {declared})",
                vm::quoted(&wanted)
            )));
        };
        let context = &self.contexts[index];
        let name = context.name();
        wider_than_binder(name, &self.held[index]).map_err(refuse)?;
        let Value::Table(table) = handlers else {
            return Err(refuse(format!(
                "handlers must be a table of phase = function, got {}",
                vm::a_type(&handlers)
            )));
        };
        // The fault named is that of the least key, so a table with several faults always
        // names the same one; what is kept while looking is at most one entry a phase.
        let mut bound: Vec<(Phase, Function)> = Vec::new();
        let mut fault: Option<(mlua::LuaString, String)> = None;
        for pair in table.pairs::<Value, Value>() {
            let (key, value) = pair?;
            let Value::String(key) = key else {
                return Err(refuse(format!(
                    "handler keys are phase names, got {}",
                    vm::a_type(&key)
                )));
            };
            let wrong = match std::str::from_utf8(&key.as_bytes())
                .ok()
                .and_then(Phase::from_name)
            {
                None => {
                    let phases: Vec<&str> = Phase::ALL.iter().map(|p| p.name()).collect();
                    Some(format!(
                        "{} is not a phase (phases: {})",
                        vm::quoted(&key.as_bytes()),
                        phases.join(", ")
                    ))
                }
                Some(phase) if !context.schedules(phase) => {
                    let scheduled: Vec<&str> =
                        context.scheduled().iter().map(|p| p.name()).collect();
                    let scheduled = if scheduled.is_empty() {
                        "none".to_owned()
                    } else {
                        scheduled.join(", ")
                    };
                    Some(format!(
                        "context '{name}' does not schedule the '{phase}' phase (it schedules: {scheduled})"
                    ))
                }
                Some(phase) => match value {
                    Value::Function(handler) => {
                        bound.push((phase, handler));
                        None
                    }
                    other => Some(format!(
                        "the '{phase}' handler for context '{name}' must be a function, got {}",
                        vm::a_type(&other)
                    )),
                },
            };
            if let Some(wrong) = wrong {
                let least = fault
                    .as_ref()
                    .is_none_or(|(was, _)| key.as_bytes()[..] < was.as_bytes()[..]);
                if least {
                    fault = Some((key, wrong));
                }
            }
        }
        if let Some((_, wrong)) = fault {
            return Err(refuse(wrong));
        }
        // Bound in key order, as the handlers were always bound.
        bound.sort_by_key(|(phase, _)| phase.name());
        for (phase, handler) in bound {
            self.insert(Binding {
                context: index,
                phase,
                handler,
            });
        }
        Ok(())
    }
}

fn refuse(text: String) -> mlua::Error {
    mlua::Error::runtime(format!("context.bind: {text}"))
}

/// Refuses to bind a handler to context `name`, whose handlers hold `held`, from code that
/// holds less: the handler would run with more than the code that bound it.
pub(crate) fn wider_than_binder(
    name: &str,
    held: &CapabilitySet,
) -> std::result::Result<(), String> {
    let lacking = lacking(held);
    if lacking.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = lacking.iter().map(|c| c.as_str()).collect();
    Err(format!(
        "a handler bound to context '{name}' would hold capabilities the binding code does \
         not: {}",
        names.join(", ")
    ))
}

/// Installs `@skein/context` in the engine VM: `require("@skein/context")` answers it.
pub(crate) fn install_context_module(lua: &Lua, bindings: &Rc<Bindings>) -> mlua::Result<()> {
    let module: Table = lua.create_table()?;
    let store = bindings.clone();
    module.raw_set(
        "bind",
        lua.create_function(move |_, (name, handlers): (Value, Value)| store.bind(name, handlers))?,
    )?;
    module.set_readonly(true);
    lua.set_named_registry_value(CONTEXT_KEY, module)
}

/// `@skein/context`: the engine VM's module, which its domain keeps in the registry; a VM
/// without one (a worker VM) answers a module whose `bind` raises, since phases run only on
/// the engine thread.
pub(crate) fn context_module(lua: &Lua) -> mlua::Result<Value> {
    vm::registered_or_refusing(lua, CONTEXT_KEY, &[("bind", WORKER_BIND)])
}

/// An advance under way: its `delta`, when it began, and the phases it ran so far with the
/// fixed steps it ran and dropped.
pub(crate) struct Advance {
    delta: Duration,
    started: Instant,
    phases: Vec<PhaseReport>,
    fixed_steps: u32,
    dropped_steps: u64,
}

impl Advance {
    /// What the advance did, once its events drained into `events` and its frame ended as
    /// `frame`: the reports are those `reporting` kept since `mark`.
    pub(crate) fn report(
        self,
        events: EventReport,
        frame: FrameReport,
        reporting: &Reporting,
        mark: u64,
    ) -> AdvanceReport {
        AdvanceReport {
            fixed_steps: self.fixed_steps,
            dropped_steps: self.dropped_steps,
            phases: self.phases,
            events,
            frame,
            elapsed: self.started.elapsed(),
            reports: reporting.since(mark),
        }
    }
}

/// One run of a phase's handlers: which ones, with what, since when, and the join that takes
/// the calls left waiting on pool work.
pub(crate) struct PhaseCall<'a> {
    pub(crate) phase: Phase,
    /// Only the handlers of the context at this index (a raw event's target); every
    /// context's when `None`.
    pub(crate) only: Option<usize>,
    /// What each handler is called with, copied into the engine VM per call.
    pub(crate) args: &'a [Message],
    /// When the run was asked for (a raw event's post): a handler's queue delay in the
    /// profile runs from here, else from the phase's start.
    pub(crate) queued: Option<Instant>,
    /// Takes the calls that wait on pool work when they yield, when given.
    pub(crate) join: Option<&'a mut PhaseJoin>,
}

impl FrameDriver {
    /// Starts an advance by `delta` whose phases may wait `budget` (at most
    /// [`MAX_DEADLINE`]) for their handlers' pool work: `vm`, the engine VM, moves its frame
    /// time on, and the frame's counts start again (an advance counts from its own start, its
    /// joins included). Answers the advance and the bound of its joins.
    pub(crate) fn begin_advance(
        &self,
        vm: &Vm,
        delta: Duration,
        budget: Duration,
    ) -> (Advance, Option<Instant>) {
        // Timers follow frame time from the first advance on (scheduler.rs, `Clock`).
        vm.advance_clock(delta);
        let started = Instant::now();
        let until = started.checked_add(budget.min(MAX_DEADLINE));
        self.services.forwarded.set(0);
        self.services.applied.set(0);
        let advance = Advance {
            delta,
            started,
            phases: Vec::new(),
            fixed_steps: 0,
            dropped_steps: 0,
        };
        (advance, until)
    }

    /// Runs the phases of `advance` in `current`, each through `broadcast`: `startup` on the
    /// generation's first frame, the early deferred drain, the `fixedUpdate` steps owed (each
    /// handler receives the step in seconds), then `update` and `lateUpdate` (handlers
    /// receive the advance's `delta` in seconds).
    pub(crate) fn run_phases(
        &self,
        advance: &mut Advance,
        current: &GenerationState,
        mut broadcast: impl FnMut(Phase, &[Message]) -> PhaseReport,
    ) {
        let phases = &mut advance.phases;
        // A generation's first frame starts it up.
        if !current.started_up.replace(true) {
            phases.push(broadcast(Phase::Startup, &[]));
        }
        let (run, dropped) = self.owe_steps(advance.delta);
        // The early deferred drain: what was deferred since the last frame runs before the
        // phases.
        current.vm.step();
        phases.reserve(run as usize + 2);
        let step_secs = [Message::Number(self.fixed_step.step.as_secs_f64())];
        for _ in 0..run {
            phases.push(broadcast(Phase::FixedUpdate, &step_secs));
        }
        let delta_secs = [Message::Number(advance.delta.as_secs_f64())];
        phases.push(broadcast(Phase::Update, &delta_secs));
        phases.push(broadcast(Phase::LateUpdate, &delta_secs));
        advance.fixed_steps = run;
        advance.dropped_steps = dropped;
    }

    /// Adds `delta` to the accumulator and takes the whole fixed steps it makes: answers how
    /// many run (at most the catch-up limit) and how many are dropped past it. The remainder,
    /// less than one step, stays.
    fn owe_steps(&self, delta: Duration) -> (u32, u64) {
        let step = self.fixed_step.step;
        let owed_time = self.accumulator.get() + delta;
        let owed = owed_time.as_nanos() / step.as_nanos();
        let remainder = owed_time.as_nanos() % step.as_nanos();
        // The remainder is below one step, which is a `Duration`: it fits in u64 nanoseconds
        // for any step shorter than 584 years.
        self.accumulator.set(Duration::from_nanos(
            u64::try_from(remainder).unwrap_or(u64::MAX),
        ));
        let run = owed.min(u128::from(self.fixed_step.max_catch_up)) as u32;
        let dropped = u64::try_from(owed - u128::from(run)).unwrap_or(u64::MAX);
        (run, dropped)
    }

    /// Calls the handlers `call` names in run order, in `current` (its bindings, engine VM and
    /// principal): each a task held to its context's budget, timed, profiled when the
    /// principal has a profile sink, its failure a diagnostic of domain `domain_name` sent to
    /// `reporting` and kept in the phase's report.
    pub(crate) fn run_handlers(
        &self,
        current: &GenerationState,
        reporting: &Reporting,
        domain_name: &str,
        call: PhaseCall<'_>,
    ) -> PhaseReport {
        let PhaseCall {
            phase,
            only,
            args,
            queued,
            mut join,
        } = call;
        let started = Instant::now();
        let queued = queued.unwrap_or(started);
        let bindings = &current.bindings;
        let principal = &current.principal;
        let due = bindings.snapshot(phase);
        let wanted = |b: &&Binding| only.is_none_or(|only| b.context == only);
        let calls = due.iter().filter(wanted).count();
        reporting.counters.handler_calls(calls);
        let profiling = principal.profile.is_some();
        let mut errors = Vec::new();
        let mut timings = Vec::with_capacity(calls);
        // One clock read per call: a call's end is the next one's start, unless a profile
        // event or a failure's diagnostic ran in between.
        let mut call = started;
        for binding in due.iter().filter(wanted) {
            let context = binding.context;
            let spec = &bindings.contexts()[context];
            let owner = bindings.call_owner(context, phase, principal);
            let called = Called {
                at: call,
                join: join.as_deref_mut(),
            };
            let failed = match lua_args(&current.vm.lua, args) {
                Ok(values) => self.call_task(
                    &current.vm,
                    reporting.reports(),
                    owner,
                    &binding.handler,
                    values,
                    called,
                ),
                Err(text) => Some(text),
            };
            let ended = Instant::now();
            timings.push(HandlerTiming {
                context: bindings.names[context].clone(),
                elapsed: ended.saturating_duration_since(call),
            });
            if profiling {
                let name = format!("{}.{phase}", spec.name());
                let delay = Some(call.saturating_duration_since(queued));
                let kind = ProfileKind::ContextCall;
                let context = Some(spec.name());
                profile_engine(
                    principal,
                    domain_name,
                    kind,
                    context,
                    Some(name),
                    call,
                    delay,
                );
            }
            let quiet = !profiling && failed.is_none();
            if let Some(message) = failed {
                let context = Some(spec.name().to_owned());
                let attribution = super::attribution(domain_name, principal.id, context);
                let mut diagnostic =
                    Diagnostic::new(DiagnosticKind::HandlerFailed, attribution, message);
                diagnostic.phase = Some(phase);
                diagnostic.source = defined_at(&binding.handler);
                reporting.diagnose(Severity::Error, &diagnostic);
                errors.push(diagnostic);
            }
            call = if quiet { ended } else { Instant::now() };
        }
        PhaseReport {
            phase,
            calls,
            timings,
            errors,
            elapsed: started.elapsed(),
            joined: Duration::ZERO,
            still_waiting: Vec::new(),
        }
    }

    /// Calls `handler` with `values` as a task of `vm` (the engine VM) owned by `owner`;
    /// answers the failure's text when it failed before its first yield. A failure after a
    /// yield becomes a [`Report`] in `reports`, labelled by the owner's identity.
    ///
    /// A call that ends in its first run (the common case) hands its end straight back, and
    /// its owner, when nothing else holds it, is kept as the spare; only a call that yields
    /// gets a completion, which turns a later failure into that report.
    pub(crate) fn call_task(
        &self,
        vm: &Vm,
        reports: &Rc<RefCell<Reports>>,
        owner: Owner,
        handler: &Function,
        values: MultiValue,
        called: Called<'_>,
    ) -> Option<String> {
        let owner = self.fresh_owner(owner);
        let first = vm.call(handler.clone(), values, owner.clone());
        // A task the call left waiting on pool work (itself, or one it spawned) is joined.
        if let Some(join) = called.join {
            join.add(&owner, called.at);
        }
        match first {
            Err(e) => Some(vm::error_message(&e)),
            Ok(FirstRun::Ended(result)) => {
                // Whatever the call started (a spawned task, a deferred one) holds the owner
                // too, and then it is not spare.
                if Rc::strong_count(&owner) == 1 {
                    self.spare_owner.set(Some(owner));
                }
                result.err().map(|failure| failure.to_string())
            }
            Ok(FirstRun::Suspended) => {
                let reports = reports.clone();
                let label: Arc<dyn OwnerIdentity> = owner.identity.clone();
                owner.set_completion(Box::new(move |_lua: &Lua, result, _commands| {
                    if let Err(failure) = result {
                        if !failure.is_cancelled() {
                            reports.borrow_mut().push(Report::new(
                                ReportKind::Handler,
                                label.to_string(),
                                failure.to_string(),
                            ));
                        }
                    }
                }));
                None
            }
        }
    }

    /// `owner` in an `Rc`: the spare one of an earlier call refilled, when there is one.
    fn fresh_owner(&self, owner: Owner) -> Rc<Owner> {
        if let Some(mut spare) = self.spare_owner.take() {
            if let Some(slot) = Rc::get_mut(&mut spare) {
                *slot = owner;
                return spare;
            }
        }
        Rc::new(owner)
    }
}

/// The owner of one handler call: named `label`, each run held to `deadline`, its tasks under
/// `authority` (the engine VM's own, the domain's, when `None`). The handler's task, the tasks
/// it starts (they share its owner) and what it dispatches (items carry the authority
/// installed when they are made) run as its context.
pub(crate) fn handler_owner(
    label: Arc<HandlerLabel>,
    deadline: Duration,
    authority: Option<Arc<Authority>>,
) -> Owner {
    let owner = Owner::new(label, deadline, None);
    match authority {
        Some(authority) => owner.with_authority(authority),
        None => owner,
    }
}

/// Copies `args` into `lua`; answers the failure's text when one can't be read.
pub(crate) fn lua_args(lua: &Lua, args: &[Message]) -> std::result::Result<MultiValue, String> {
    let mut values = MultiValue::with_capacity(args.len());
    for arg in args {
        match arg.to_lua(lua) {
            Ok(v) => values.push_back(v),
            Err(e) => {
                return Err(format!(
                    "its arguments could not be read: {}",
                    vm::error_message(&e)
                ))
            }
        }
    }
    Ok(values)
}

/// A phase handler's failure, `message`, as a report of the domain labelled by its `context`
/// and `phase`: for the callers nobody reads a phase report of (a startup or shutdown run, a
/// frame loop).
pub(crate) fn phase_failure(phase: Phase, context: Option<&str>, message: String) -> Report {
    let source = HandlerLabel::Phase {
        context: Arc::from(context.unwrap_or("")),
        phase,
    };
    Report::new(ReportKind::Handler, source.to_string(), message)
}

/// Where a handler call stands in its phase: when it began, and the join of the phase (none
/// for a call no frame joins: an event handler's, a shutdown handler's).
pub(crate) struct Called<'a> {
    pub(crate) at: Instant,
    pub(crate) join: Option<&'a mut PhaseJoin>,
}

impl Called<'_> {
    /// A call nothing joins, beginning now.
    pub(crate) fn unjoined() -> Called<'static> {
        Called {
            at: Instant::now(),
            join: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tagged(lua: &Lua, tag: &str) -> Value {
        let tag = tag.to_owned();
        Value::Function(lua.create_function(move |_, ()| Ok(tag.clone())).unwrap())
    }

    fn handlers(lua: &Lua, phase: &str, tag: &str) -> Value {
        let t = lua.create_table().unwrap();
        t.raw_set(phase, tagged(lua, tag)).unwrap();
        Value::Table(t)
    }

    fn name(lua: &Lua, s: &str) -> Value {
        Value::String(lua.create_string(s).unwrap())
    }

    #[test]
    fn due_orders_by_priority_then_declaration_then_bind_order() {
        let lua = Lua::new();
        let bindings = Bindings::unchecked(vec![
            ContextSpec::new("low").phases([Phase::Update]).priority(-1),
            ContextSpec::new("a").phases([Phase::Update]),
            ContextSpec::new("high").phases([Phase::Update]).priority(3),
            ContextSpec::new("b").phases([Phase::Update]),
        ]);
        for (context, tag) in [
            ("b", "b1"),
            ("low", "low"),
            ("a", "a"),
            ("high", "high"),
            ("b", "b2"),
        ] {
            bindings
                .bind(name(&lua, context), handlers(&lua, "update", tag))
                .unwrap();
        }
        let order: Vec<String> = bindings
            .due(Phase::Update)
            .into_iter()
            .map(|(_, f)| f.call::<String>(()).unwrap())
            .collect();
        assert_eq!(order, ["high", "a", "b1", "b2", "low"]);
        assert!(bindings.due(Phase::Input).is_empty());
        bindings.clear();
        assert!(bindings.due(Phase::Update).is_empty());
    }
}
