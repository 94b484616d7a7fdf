//! The scheduler of one domain: the handlers scripts bind to contexts (`@skein/context`),
//! [`ScriptDomain::run_phase`], [`ScriptDomain::advance`] and [`ScriptDomain::stop`].
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
//! [`Error::Reentrant`]; its work belongs in an event or a task for the next frame.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mlua::{Function, Lua, MultiValue, Table, Value};

use crate::domain::frame::context::ContextSpec;
use crate::domain::frame::handler_label::HandlerLabel;
use crate::domain::frame::join::{Joining, PhaseJoin, StillWaiting};
use crate::domain::lifecycle::DomainState;
use crate::domain::EventReport;
use crate::domain::{FrameReport, Report, ReportKind, ScriptDomain};
use crate::error::{Error, Halt, Result};
use crate::jobs::MAX_DEADLINE;
use crate::principal::capability::{lacking, Authority, CapabilitySet, Grant};
use crate::principal::diagnostic::{defined_at, Attribution, Diagnostic, DiagnosticKind, Severity};
use crate::principal::profile::ProfileKind;
use crate::principal::Generation;
use crate::principal::Phase;
use crate::value::Message;
use crate::vm::{self, FirstRun, Owner, OwnerIdentity};

/// Registry key of the engine VM's `@skein/context` table.
pub(crate) const CONTEXT_KEY: &str = "skein.context";

/// What `context.bind` raises outside the engine VM.
const WORKER_BIND: &str =
    "context.bind: handlers bind only in the engine VM; a worker VM runs jobs, not phases";

/// What one [`run_phase`](ScriptDomain::run_phase) did.
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
    /// [`advance`](ScriptDomain::advance)): they go on in a later frame.
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

/// What one [`advance`](ScriptDomain::advance) did.
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
    /// [`drain_events`](ScriptDomain::drain_events)).
    pub events: EventReport,
    /// The engine frame that ended the advance.
    pub frame: FrameReport,
    /// How long the advance took, wall time.
    pub elapsed: Duration,
    /// The reports made during the whole advance, its phases and its frame, oldest first:
    /// copies of what waits in [`take_reports`](ScriptDomain::take_reports), as
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

/// Clears the scheduler's busy flag when an entry ends, however it ends.
pub(crate) struct Entered<'a>(&'a Cell<Option<&'static str>>);

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        self.0.set(None);
    }
}

impl ScriptDomain {
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
    /// a failure after that is a [`Report`](crate::Report) of the domain.
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
        // Timers follow frame time from the first advance on (scheduler.rs, `Clock`).
        self.current.vm.advance_clock(delta);
        let started = Instant::now();
        let until = started.checked_add(budget.min(MAX_DEADLINE));
        self.frames.services.forwarded.set(0);
        self.frames.services.applied.set(0);
        let mark = self.reporting.mark();
        let mut phases = Vec::new();
        // A generation's first frame starts it up.
        if !self.current.started_up.replace(true) {
            phases.push(self.broadcast(Phase::Startup, &[], until));
        }
        let step = self.frames.fixed_step.step;
        let owed_time = self.frames.accumulator.get() + delta;
        let owed = owed_time.as_nanos() / step.as_nanos();
        let remainder = owed_time.as_nanos() % step.as_nanos();
        // The remainder is below one step, which is a `Duration`: it fits in u64 nanoseconds
        // for any step shorter than 584 years.
        self.frames.accumulator.set(Duration::from_nanos(
            u64::try_from(remainder).unwrap_or(u64::MAX),
        ));
        let run = owed.min(u128::from(self.frames.fixed_step.max_catch_up)) as u32;
        let dropped = u64::try_from(owed - u128::from(run)).unwrap_or(u64::MAX);
        // The early deferred drain: what was deferred since the last frame runs before the
        // phases.
        self.current.vm.step();
        phases.reserve(run as usize + 2);
        let step_secs = [Message::Number(step.as_secs_f64())];
        for _ in 0..run {
            phases.push(self.broadcast(Phase::FixedUpdate, &step_secs, until));
        }
        let delta_secs = [Message::Number(delta.as_secs_f64())];
        phases.push(self.broadcast(Phase::Update, &delta_secs, until));
        phases.push(self.broadcast(Phase::LateUpdate, &delta_secs, until));
        // After the phases, so an event emitted in one is delivered in this advance.
        let events = self.run_event_drain();
        // The frame ends with the late deferred drain.
        let frame = self.run_frame(delta, false);
        Ok(AdvanceReport {
            fixed_steps: run,
            dropped_steps: dropped,
            phases,
            events,
            frame,
            elapsed: started.elapsed(),
            reports: self.reporting.since(mark),
        })
    }

    /// Ends the domain: runs the `shutdown` phase (its failures become
    /// [`Report`](crate::Report)s), drops every bound handler, then ends the generation as a
    /// restart does (queued pool items are refused unrun naming `domain '<name>' stopped`, its
    /// running pool jobs are interrupted at their next interrupt check, so a host
    /// [`Promise`](crate::Promise) of one settles as [`Error::Cancelled`](crate::Error::Cancelled)
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
    /// [`Report`](crate::Report) labelled by its context, as nobody reads a phase report here.
    pub(crate) fn broadcast_reporting(&self, phase: Phase) {
        let report = self.broadcast(phase, &[], None);
        for error in report.errors {
            let source = HandlerLabel::Phase {
                context: Arc::from(error.attribution.context.as_deref().unwrap_or("")),
                phase,
            };
            self.reporting.keep(Report::new(
                ReportKind::Handler,
                source.to_string(),
                error.message,
            ));
        }
    }

    /// Marks the start of a scheduler entry: refuses a stopped domain and a nested entry, and
    /// moves a loaded domain to `Running`.
    pub(crate) fn enter(&self, entry: &'static str) -> Result<Entered<'_>> {
        let halted = match self.life.state.get() {
            DomainState::Stopping => Some(Halt::Stopping),
            DomainState::Stopped => Some(Halt::Stopped),
            _ => None,
        };
        if let Some(state) = halted {
            return Err(Error::Stopped {
                entry,
                domain: self.name.clone(),
                state,
                new_generation: false,
            });
        }
        if self.frames.busy.get().is_some() {
            return Err(Error::Reentrant(entry));
        }
        self.frames.busy.set(Some(entry));
        self.mark_running();
        Ok(Entered(&self.frames.busy))
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
            if !join.is_empty() {
                let joining = Instant::now();
                self.join(join, until, &mut report.still_waiting);
                report.joined = joining.elapsed();
                report.elapsed = started.elapsed();
            }
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
        mut join: Option<&mut PhaseJoin>,
    ) -> PhaseReport {
        let started = Instant::now();
        let queued = queued.unwrap_or(started);
        let due = self.current.bindings.snapshot(phase);
        let wanted = |b: &&Binding| only.is_none_or(|only| b.context == only);
        let calls = due.iter().filter(wanted).count();
        self.reporting.counters.handler_calls(calls);
        let profiling = self.current.principal.profile.is_some();
        let mut errors = Vec::new();
        let mut timings = Vec::with_capacity(calls);
        // One clock read per call: a call's end is the next one's start, unless a profile
        // event or a failure's diagnostic ran in between.
        let mut call = started;
        for binding in due.iter().filter(wanted) {
            let context = binding.context;
            let spec = &self.current.bindings.contexts()[context];
            let authority = self
                .current
                .bindings
                .authority(context, &self.current.principal.authority);
            let called = Called {
                at: call,
                join: join.as_deref_mut(),
            };
            let failed = self.call_handler(
                spec,
                (context, phase),
                authority,
                &binding.handler,
                args,
                called,
            );
            let ended = Instant::now();
            timings.push(HandlerTiming {
                context: self.current.bindings.names[context].clone(),
                elapsed: ended.saturating_duration_since(call),
            });
            if profiling {
                let name = format!("{}.{phase}", spec.name());
                self.profiled_after(
                    ProfileKind::ContextCall,
                    Some(spec.name()),
                    Some(name),
                    call,
                    Some(call.saturating_duration_since(queued)),
                );
            }
            let quiet = !profiling && failed.is_none();
            if let Some(message) = failed {
                let attribution = Attribution {
                    domain_name: self.name.clone(),
                    domain: self.id(),
                    generation: self.generation(),
                    context: Some(spec.name().to_owned()),
                    actor: None,
                };
                let mut diagnostic =
                    Diagnostic::new(DiagnosticKind::HandlerFailed, attribution, message);
                diagnostic.phase = Some(phase);
                diagnostic.source = defined_at(&binding.handler);
                self.diagnose(Severity::Error, &diagnostic);
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

    /// Calls one handler as a task of the engine VM under its context's budget; answers the
    /// failure's text when it failed before its first yield.
    fn call_handler(
        &self,
        spec: &ContextSpec,
        (context, phase): (usize, Phase),
        authority: Arc<Authority>,
        handler: &Function,
        args: &[Message],
        called: Called<'_>,
    ) -> Option<String> {
        let label = self.current.bindings.label(context, phase);
        let deadline = spec
            .get_budget()
            .unwrap_or(self.current.principal.max_deadline);
        let values = match self.lua_args(args) {
            Ok(values) => values,
            Err(text) => return Some(text),
        };
        self.call_task(label, deadline, Some(authority), handler, values, called)
    }

    /// Copies `args` into the engine VM; answers the failure's text when one can't be read.
    pub(crate) fn lua_args(&self, args: &[Message]) -> std::result::Result<MultiValue, String> {
        let lua = &self.current.vm.lua;
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

    /// Calls `handler` with `values` as a task of the engine VM held to `deadline` per run,
    /// under `authority` (the domain's when `None`); answers the failure's text when it failed
    /// before its first yield. A failure after a yield becomes a [`Report`] labelled `label`.
    ///
    /// A call that ends in its first run (the common case) hands its end straight back; only
    /// a call that yields gets a completion, which turns a later failure into that report.
    pub(crate) fn call_task(
        &self,
        label: Arc<HandlerLabel>,
        deadline: Duration,
        authority: Option<Arc<Authority>>,
        handler: &Function,
        values: MultiValue,
        called: Called<'_>,
    ) -> Option<String> {
        // The handler's task, the tasks it starts (they share its owner) and what it dispatches
        // (items carry the authority installed when they are made) run as its context.
        let mut owner = Owner::new(label.clone(), deadline, None);
        if let Some(authority) = authority {
            owner = owner.with_authority(authority);
        }
        let owner = self.fresh_owner(owner);
        let first = self.current.vm.call(handler.clone(), values, owner.clone());
        // A task the call left waiting on pool work (itself, or one it spawned) is joined.
        if let Some(join) = called.join {
            join.add(&owner, &label, called.at);
        }
        match first {
            Err(e) => Some(vm::error_message(&e)),
            Ok(FirstRun::Ended(result)) => {
                // Whatever the call started (a spawned task, a deferred one) holds the owner
                // too, and then it is not spare.
                if Rc::strong_count(&owner) == 1 {
                    self.frames.spare_owner.set(Some(owner));
                }
                result.err().map(|failure| failure.to_string())
            }
            Ok(FirstRun::Suspended) => {
                let reports = self.reporting.reports().clone();
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

impl ScriptDomain {
    /// `owner` in an `Rc`: the spare one of an earlier call refilled, when there is one.
    fn fresh_owner(&self, owner: Owner) -> Rc<Owner> {
        if let Some(mut spare) = self.frames.spare_owner.take() {
            if let Some(slot) = Rc::get_mut(&mut spare) {
                *slot = owner;
                return spare;
            }
        }
        Rc::new(owner)
    }
}

/// How reports name a handler: `context 'game' update handler`.
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
