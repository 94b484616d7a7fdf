//! The scheduler of one domain: the [`FrameDriver`]'s side of running the handlers scripts bound
//! to contexts ([`Bindings`](super::bindings::Bindings)): an advance's phases
//! ([`FrameDriver::run_phases`]) and each phase's handler calls ([`FrameDriver::run_handlers`],
//! [`FrameDriver::call_task`]), with the reports they answer. The entry points (`run_phase`,
//! `advance`, `stop`) are [`ScriptDomain`](crate::ScriptDomain)'s.
//!
//! Every entry into a domain's phase handlers goes through here, in the bindings' run order.
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
//! Of the calls: a handler call's owner is fresh or the driver's spare, never one something
//! else still holds; an advance runs at most the catch-up bound of fixed steps and drops the
//! rest, counted.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mlua::{Function, Lua, MultiValue};

use super::bindings::Binding;
use super::driver::FrameDriver;
use crate::domain::frame::call_reports::{AdvanceReport, EventReport, HandlerTiming, PhaseReport};
use crate::domain::frame::handler_label::HandlerLabel;
use crate::domain::frame::join::PhaseJoin;
use crate::domain::generation::GenerationState;
use crate::domain::reporting::Reporting;
use crate::domain::reports::Reports;
use crate::domain::sinks::profile_engine;
use crate::domain::{FrameReport, Report, ReportKind};
use crate::jobs::MAX_DEADLINE;
use crate::principal::diagnostic::{defined_at, Diagnostic, DiagnosticKind, Severity};
use crate::principal::profile::ProfileKind;
use crate::principal::Phase;
use crate::value::Message;
use crate::vm::{self, FirstRun, Owner, OwnerIdentity, Vm};

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
