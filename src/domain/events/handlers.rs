//! The event-handlers part of a domain ([`EventHandlers`]): the handlers bound to names
//! (`@skein/events`'s `on`,
//! [`ScriptDomain::bind_event_handler`](crate::ScriptDomain::bind_event_handler)), `emit`,
//! routes to other domains, and the drain that delivers queued events
//! ([`ScriptDomain::drain_events`](crate::ScriptDomain::drain_events)). The drain is given the
//! current generation, the frame driver that calls handlers as tasks of its engine VM, and the
//! reporting part.
//!
//! Raw events go to the `event` phase handlers of their target context(s) through the
//! scheduler; named events go to the handlers bound to their name, and nothing else: a name is
//! never a phase, so `emit("startup")` runs only handlers bound to `startup`. The queue itself
//! (limits, generations) is `event_queue.rs`; the engine events `engine.on` watchers see are a
//! different thing (`jobs/events.rs`).
//!
//! The invariants: each name's handlers are kept in run order (priority, higher first, then
//! bind order), and a delivery runs a snapshot of them, so a bind or an unbind during it counts
//! from the next event on; a Luau handler belongs to the generation whose engine VM bound it
//! and goes with that generation, while the host's handlers and routes outlive generations; an
//! event of an ended generation is counted stale, never delivered (so never routed); a failing
//! handler is a diagnostic of the drain and the next one still runs; the diagnostics `emit`
//! recorded are handed to the next drain, once.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use mlua::{Function, Lua, MultiValue, Table, Value};

use crate::domain::events::emit::{
    install_off_engine_events, read_emit, read_event_name, EmitRefused, EVENTS_KEY, WORKER_ON,
    WORKER_WAIT,
};
use crate::domain::frame::bindings::{handler_owner, wider_than_binder, Bindings};
use crate::domain::frame::call_reports::EventReport;
use crate::domain::frame::context::ContextSpec;
use crate::domain::frame::driver::FrameDriver;
use crate::domain::frame::handler_label::HandlerLabel;
use crate::domain::frame::phases::{Called, PhaseCall};
use crate::domain::generation::GenerationState;
use crate::domain::reporting::Reporting;
use crate::domain::sinks;
use crate::domain::{DomainMailbox, Report, ReportKind};
use crate::error::{Error, NameRefusal, Result};
use crate::jobs::{home_principal, registering_authority};
use crate::principal::capability::{Authority, CapabilitySet};
use crate::principal::diagnostic::{defined_at, Attribution, Diagnostic, DiagnosticKind};
use crate::principal::event_queue::{EventQueue, QueuedEvent, Routing};
use crate::principal::profile::ProfileKind;
use crate::principal::{DomainId, EventTarget, Generation, Phase, PostRefused, Severity};
use crate::value::Message;
use crate::vm::{self, panic_message, SignalKind};

/// What `events.emit` raises in a VM that belongs to no domain: there is no queue to post to.
pub(crate) const NO_DOMAIN_EMIT: &str =
    "events.emit: this VM belongs to no domain, so there is no event queue to emit to";

type HostHandler = Rc<RefCell<Box<dyn FnMut(Message) -> std::result::Result<(), String>>>>;

/// A handler bound to a name.
#[derive(Clone)]
enum NamedHandler {
    /// A function of the engine VM, bound in `context` when one was named.
    Luau {
        function: Function,
        context: Option<usize>,
        /// Without a context: the authority of the task that bound it, which each call holds,
        /// so a handler never holds more than the code that bound it (`None`: the VM's own).
        authority: Option<Arc<Authority>>,
        /// How reports name it; made when it was bound, shared by each call.
        label: Arc<HandlerLabel>,
    },
    /// The host's.
    Host(HostHandler),
}

#[derive(Clone)]
struct NamedBinding {
    id: u64,
    priority: i32,
    /// The generation whose engine VM bound it; `None` for the host's, which outlive
    /// generations.
    generation: Option<Generation>,
    handler: NamedHandler,
}

/// The named-event handlers of a domain, its routes and the diagnostics `emit` recorded.
pub(crate) struct EventHandlers {
    queue: Arc<EventQueue>,
    /// The domain's name, for attributions.
    domain_name: String,
    domain: DomainId,
    /// The host's contexts' names and priorities, for `events.on(name, fn, context)`.
    contexts: Box<[(String, i32)]>,
    /// The capabilities each context's handlers hold: what code binding to it must hold.
    held: Rc<[CapabilitySet]>,
    next_id: Cell<u64>,
    /// Each name's handlers in run order: priority (higher first), then bind order. A bind or
    /// an unbind makes a new list, so a delivery's snapshot is a reference count, not a copy.
    named: RefCell<BTreeMap<Arc<str>, Rc<[NamedBinding]>>>,
    routes: RefCell<Vec<(Arc<str>, DomainMailbox)>>,
    errors: RefCell<Vec<Diagnostic>>,
    warnings: RefCell<Vec<Diagnostic>>,
}

impl EventHandlers {
    pub(crate) fn new(
        queue: Arc<EventQueue>,
        domain_name: &str,
        domain: DomainId,
        bindings: &Bindings,
    ) -> Rc<EventHandlers> {
        Rc::new(EventHandlers {
            queue,
            domain_name: domain_name.to_owned(),
            domain,
            contexts: bindings
                .contexts()
                .iter()
                .map(|c| (c.name().to_owned(), c.get_priority()))
                .collect(),
            held: bindings.held(),
            next_id: Cell::new(1),
            named: RefCell::default(),
            routes: RefCell::default(),
            errors: RefCell::default(),
            warnings: RefCell::default(),
        })
    }

    pub(crate) fn queue(&self) -> &Arc<EventQueue> {
        &self.queue
    }

    /// A new generation: the Luau handlers of other generations were functions of engine VMs
    /// that are gone and go too; the host's handlers and routes stay, and so do the ones the
    /// new generation bound while a reload built it.
    pub(crate) fn next_generation(&self, generation: Generation) {
        self.unbind_where(|g| g.is_some_and(|g| g != generation));
    }

    /// A reload's candidate was discarded: the handlers its engine VM bound go with it, and so
    /// do the diagnostics its `emit` recorded (nothing of it reaches the running generation's
    /// reports).
    pub(crate) fn discard_generation(&self, generation: Generation) {
        self.unbind_where(|g| g == Some(generation));
        let theirs = |d: &Diagnostic| d.attribution.generation == generation;
        self.errors.borrow_mut().retain(|d| !theirs(d));
        self.warnings.borrow_mut().retain(|d| !theirs(d));
    }

    fn unbind_where(&self, which: impl Fn(Option<Generation>) -> bool) {
        let mut named = self.named.borrow_mut();
        for list in named.values_mut() {
            if list.iter().any(|b| which(b.generation)) {
                *list = list
                    .iter()
                    .filter(|b| !which(b.generation))
                    .cloned()
                    .collect();
            }
        }
        named.retain(|_, list| !list.is_empty());
    }

    /// Attributes a diagnostic of `emit` to the generation whose VM emitted.
    fn attribution(&self, generation: Generation) -> Attribution {
        Attribution {
            domain_name: self.domain_name.clone(),
            domain: self.domain,
            generation,
            context: None,
            actor: None,
        }
    }

    fn bind(
        &self,
        name: &str,
        priority: i32,
        generation: Option<Generation>,
        handler: NamedHandler,
    ) -> u64 {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        let mut named = self.named.borrow_mut();
        let slot = named.entry(Arc::from(name)).or_insert_with(|| Rc::from([]));
        let at = slot.partition_point(|b| b.priority >= priority);
        let mut list = slot.to_vec();
        list.insert(
            at,
            NamedBinding {
                id,
                priority,
                generation,
                handler,
            },
        );
        *slot = list.into();
        id
    }

    fn unbind(&self, name: &str, id: u64) -> bool {
        let mut named = self.named.borrow_mut();
        let Some(list) = named.get_mut(name) else {
            return false;
        };
        let removed = list.iter().any(|b| b.id == id);
        if removed {
            *list = list.iter().filter(|b| b.id != id).cloned().collect();
        }
        if list.is_empty() {
            named.remove(name);
        }
        removed
    }

    /// The handlers of `name` in run order: a snapshot, so binding or removing during a
    /// delivery counts from the next event on.
    fn due(&self, name: &str) -> Option<Rc<[NamedBinding]>> {
        self.named.borrow().get(name).cloned()
    }

    /// Records a `queue full` refusal of `emit` and answers the error it raises.
    fn refuse(&self, generation: Generation, name: &str, refused: &str) -> mlua::Error {
        let message = format!("events.emit: {refused}");
        let mut diagnostic = Diagnostic::new(
            DiagnosticKind::QueueFull,
            self.attribution(generation),
            message.clone(),
        );
        diagnostic.event = Some(name.to_owned());
        self.errors.borrow_mut().push(diagnostic);
        mlua::Error::runtime(message)
    }

    /// `events.emit(name, payload)` from the engine VM of `generation`: queues the event here,
    /// then a copy on every route of the name.
    fn emit(&self, generation: Generation, name: Value, payload: Value) -> mlua::Result<()> {
        // The name as a diagnostic names it, written out only for a refusal.
        let event = || match &name {
            Value::String(s) => s.to_string_lossy(),
            _ => String::new(),
        };
        let refused = |refused: EmitRefused| match refused {
            EmitRefused::Full(text) => self.refuse(generation, &event(), &text),
            other => other.into_lua(),
        };
        let (name, payload) = read_emit(&self.queue, &name, &payload).map_err(refused)?;
        let routes = self.routes_of(&name);
        let copy = (!routes.is_empty()).then(|| payload.clone());
        self.queue
            .push_named(generation, &name, payload)
            .map_err(|e| refused(e.into()))?;
        if let Some(copy) = copy {
            self.post_copies(generation, &name, routes, &copy);
        }
        Ok(())
    }

    /// The mailboxes `name` is routed to.
    fn routes_of(&self, name: &str) -> Vec<DomainMailbox> {
        self.routes
            .borrow()
            .iter()
            .filter(|(n, _)| **n == *name)
            .map(|(_, m)| m.clone())
            .collect()
    }

    /// Posts a copy of `payload` to each of `routes`; a recipient that is stopped or full is a
    /// warning for the next report, never the emitter's error.
    fn post_copies(
        &self,
        generation: Generation,
        name: &str,
        routes: Vec<DomainMailbox>,
        payload: &Message,
    ) {
        for mailbox in routes {
            if let Err(refused) = mailbox.post_named(name, payload.clone()) {
                let message = format!(
                    "warning: route '{name}' to {}: the copy was not delivered: {refused}",
                    mailbox_label(&mailbox)
                );
                let mut diagnostic = Diagnostic::new(
                    DiagnosticKind::RouteUndelivered,
                    self.attribution(generation),
                    message,
                );
                diagnostic.event = Some(name.to_owned());
                self.warnings.borrow_mut().push(diagnostic);
            }
        }
    }

    /// `events.on(name, fn, context?)` in the engine VM of `generation`: binds `fn` and
    /// answers its remover.
    fn on(
        self: &Rc<Self>,
        lua: &Lua,
        generation: Generation,
        name: Value,
        handler: Value,
        context: Value,
    ) -> mlua::Result<Function> {
        let name = read_event_name(&self.queue, &name)
            .map_err(|why| mlua::Error::runtime(format!("events.on: {why}")))?;
        let Value::Function(function) = handler else {
            return Err(mlua::Error::runtime(format!(
                "events.on: the handler must be a function, got {}",
                vm::a_type(&handler)
            )));
        };
        let (context, priority) = match context {
            Value::Nil => (None, 0),
            Value::String(s) => {
                let wanted = s.as_bytes();
                let Some(index) = self
                    .contexts
                    .iter()
                    .position(|(n, _)| n.as_bytes() == &wanted[..])
                else {
                    return Err(mlua::Error::runtime(format!(
                        "events.on: no context named {} is declared",
                        vm::quoted(&wanted)
                    )));
                };
                wider_than_binder(&self.contexts[index].0, &self.held[index])
                    .map_err(|e| mlua::Error::runtime(format!("events.on: {e}")))?;
                (Some(index), self.contexts[index].1)
            }
            other => {
                return Err(mlua::Error::runtime(format!(
                    "events.on: context must be a string, got {}",
                    vm::a_type(&other)
                )))
            }
        };
        let label = Arc::new(HandlerLabel::Event {
            context: context.map(|i| Arc::from(self.contexts[i].0.as_str())),
            name: Arc::from(name.as_str()),
        });
        let authority = if context.is_none() {
            registering_authority(lua)
        } else {
            None
        };
        let handler = NamedHandler::Luau {
            function,
            context,
            authority,
            label,
        };
        let id = self.bind(&name, priority, Some(generation), handler);
        let weak = Rc::downgrade(self);
        lua.create_function(move |_, ()| {
            Ok(weak
                .upgrade()
                .map(|handlers| handlers.unbind(&name, id))
                .unwrap_or(false))
        })
    }
}

fn mailbox_label(mailbox: &DomainMailbox) -> String {
    format!("a domain (generation {})", mailbox.generation().get())
}

/// Installs `@skein/events` in the engine VM of `generation`: `require("@skein/events")`
/// answers it. What the VM emits is stamped with `generation` and what it binds is tagged with
/// it, so a reload's candidate never mixes with the generation it may replace.
pub(crate) fn install_events_module(
    lua: &Lua,
    handlers: &Rc<EventHandlers>,
    generation: Generation,
) -> mlua::Result<()> {
    let module: Table = lua.create_table()?;
    let store = handlers.clone();
    module.raw_set(
        "emit",
        lua.create_function(move |_, (name, payload): (Value, Value)| {
            store.emit(generation, name, payload)
        })?,
    )?;
    let store = handlers.clone();
    module.raw_set(
        "on",
        lua.create_function(
            move |lua, (name, handler, context): (Value, Value, Value)| {
                store.on(lua, generation, name, handler, context)
            },
        )?,
    )?;
    let park = lua.create_function(|lua, (name, timeout): (Value, Value)| {
        vm::park_signal(lua, SignalKind::Event, &name, &timeout, 0)
    })?;
    module.raw_set("wait", vm::wait_function(lua, "events.wait", park)?)?;
    module.set_readonly(true);
    lua.set_named_registry_value(EVENTS_KEY, module)
}

/// `@skein/events` as `require` answers it: the VM's own (the engine VM's, or an actor's),
/// else, in a pool worker VM of a domain, one made now whose `emit` posts to that domain's
/// queue (see `emit.rs`); a VM of no domain gets functions that raise.
pub(crate) fn events_module(lua: &Lua) -> mlua::Result<Value> {
    let module = lua.named_registry_value::<Value>(EVENTS_KEY)?;
    if !module.is_nil() {
        return Ok(module);
    }
    if let Some(principal) = home_principal(lua) {
        let authority = Some(principal.authority.clone());
        return install_off_engine_events(lua, DomainMailbox::of(&principal), authority);
    }
    vm::registered_or_refusing(
        lua,
        EVENTS_KEY,
        &[
            ("on", WORKER_ON),
            ("emit", NO_DOMAIN_EMIT),
            ("wait", WORKER_WAIT),
        ],
    )
}

impl EventHandlers {
    /// Binds the host's handler `f` to the named event `name`, at priority 0 and for every
    /// generation.
    pub(crate) fn bind_host<F>(&self, name: &str, f: F) -> Result<()>
    where
        F: FnMut(Message) -> std::result::Result<(), String> + 'static,
    {
        self.queue
            .check_name(name, Message::Nil)
            .map_err(|e| event_name_refused("bind_event_handler", &e))?;
        self.bind(
            name,
            0,
            None,
            NamedHandler::Host(Rc::new(RefCell::new(Box::new(f)))),
        );
        Ok(())
    }

    /// Routes the named event `name` to `mailbox`, for every generation.
    pub(crate) fn route(&self, name: &str, mailbox: DomainMailbox) -> Result<()> {
        self.queue
            .check_name(name, Message::Nil)
            .map_err(|e| event_name_refused("route", &e))?;
        self.routes.borrow_mut().push((Arc::from(name), mailbox));
        Ok(())
    }

    /// The report of a drain the domain refused (`refused`): nothing delivered, the events
    /// still pending; a reentrant drain is also kept in `reporting` as a report.
    pub(crate) fn not_drained(&self, refused: Error, reporting: &Reporting) -> EventReport {
        if matches!(refused, Error::Reentrant(_)) {
            reporting.keep(Report::new(
                ReportKind::Service,
                "drain_events",
                refused.to_string(),
            ));
        }
        EventReport {
            pending: self.queue.pending().0,
            ..EventReport::default()
        }
    }

    /// One drain, inside a scheduler entry, of the events `current` queued: raw events to the
    /// `event` phase, named ones to their routes (when routed at the drain), their waiters and
    /// their handlers, each handler a task of the engine VM that `frames` calls. An event of
    /// another generation is discarded, `count_stale` called with 1 for it. Diagnostics go to
    /// `reporting` as they are made, and the drain is counted there.
    pub(crate) fn drain(
        &self,
        current: &GenerationState,
        frames: &FrameDriver,
        reporting: &Reporting,
        mut count_stale: impl FnMut(u64),
    ) -> EventReport {
        let batch = self.queue.take(self.queue.limits().per_drain);
        let mut report = EventReport::default();
        // The Luau string of the last name delivered: events of one name in a row share it.
        let mut name_string = None;
        for envelope in batch {
            let posted = envelope.posted;
            if envelope.generation != current.generation() {
                // A restart clears the queue, so this is only a post that raced it.
                count_stale(1);
                continue;
            }
            let handled = match envelope.event {
                QueuedEvent::Raw { target, payload } => {
                    let only = match &target {
                        EventTarget::All => None,
                        EventTarget::Context(name) => {
                            let contexts = current.bindings.contexts();
                            match contexts.iter().position(|c| c.name() == name) {
                                Some(index) => Some(index),
                                None => {
                                    report.unhandled += 1;
                                    continue;
                                }
                            }
                        }
                    };
                    let call = PhaseCall {
                        phase: Phase::Event,
                        only,
                        args: &[payload],
                        queued: Some(posted),
                        join: None,
                    };
                    let phase = frames.run_handlers(current, reporting, &self.domain_name, call);
                    report.errors.extend(phase.errors);
                    phase.calls > 0
                }
                QueuedEvent::Named {
                    name,
                    payload,
                    routing,
                } => {
                    if routing == Routing::AtDrain {
                        let routes = self.routes_of(&name);
                        if !routes.is_empty() {
                            self.post_copies(envelope.generation, &name, routes, &payload);
                        }
                    }
                    // Waiters first, in arrival order: they take the event as it was queued,
                    // whatever its handlers do after.
                    let released =
                        current
                            .vm
                            .release_signal(SignalKind::Event, &name, u64::MAX, &payload);
                    let handled = self.deliver_named(
                        current,
                        frames,
                        reporting,
                        &name,
                        &mut name_string,
                        payload,
                        posted,
                        &mut report.errors,
                    );
                    handled || released > 0
                }
            };
            if handled {
                report.delivered += 1;
            } else {
                report.unhandled += 1;
            }
        }
        let mut refused = std::mem::take(&mut *self.errors.borrow_mut());
        refused.extend(self.queue.take_refusals());
        let warnings = std::mem::take(&mut *self.warnings.borrow_mut());
        for d in &refused {
            reporting.diagnose(Severity::Error, d);
        }
        for d in &warnings {
            reporting.diagnose(Severity::Warning, d);
        }
        report.errors.extend(refused);
        report.warnings = warnings;
        reporting
            .counters
            .drained(report.delivered, report.unhandled);
        report.pending = self.queue.pending().0;
        report
    }

    /// Calls every handler of `name`; answers whether there was one. `name_string` keeps the
    /// name's Luau string from one event to the next.
    #[allow(clippy::too_many_arguments)]
    fn deliver_named(
        &self,
        current: &GenerationState,
        frames: &FrameDriver,
        reporting: &Reporting,
        name: &Arc<str>,
        name_string: &mut Option<(Arc<str>, Value)>,
        payload: Message,
        posted: Instant,
        errors: &mut Vec<Diagnostic>,
    ) -> bool {
        let Some(due) = self.due(name) else {
            return false;
        };
        reporting.counters.handler_calls(due.len());
        let profiling = current.principal.profile.is_some();
        for binding in due.iter() {
            let (context, failed, source) = match &binding.handler {
                NamedHandler::Luau {
                    function,
                    context,
                    authority,
                    label,
                } => {
                    let context_index = *context;
                    let context = context.map(|i| &current.bindings.contexts()[i]);
                    let deadline = context
                        .and_then(ContextSpec::get_budget)
                        .unwrap_or(current.principal.max_deadline);
                    let call = profiling.then(Instant::now);
                    let authority = match context_index {
                        Some(i) => {
                            Some(current.bindings.authority(i, &current.principal.authority))
                        }
                        None => authority.clone(),
                    };
                    let failed = match named_args(&current.vm.lua, name, name_string, &payload) {
                        Ok(values) => {
                            let called = Called::unjoined();
                            let owner = handler_owner(label.clone(), deadline, authority);
                            let (vm, reports) = (&current.vm, reporting.reports());
                            frames.call_task(vm, reports, owner, function, values, called)
                        }
                        Err(text) => Some(text),
                    };
                    if let Some(call) = call {
                        let context = context.map(ContextSpec::name);
                        let kind = ProfileKind::ContextCall;
                        let event = Some(format!("{}.event '{name}'", context.unwrap_or("")));
                        let delay = Some(call.saturating_duration_since(posted));
                        let principal = &current.principal;
                        let domain = &self.domain_name;
                        sinks::profile_engine(principal, domain, kind, context, event, call, delay);
                    }
                    let source = failed.as_ref().and_then(|_| defined_at(function));
                    (context.map(|c| c.name().to_owned()), failed, source)
                }
                NamedHandler::Host(f) => {
                    let message = payload.clone();
                    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        (f.borrow_mut())(message)
                    }));
                    let failed = match ran {
                        Ok(Ok(())) => None,
                        Ok(Err(text)) => Some(text),
                        Err(panic) => Some(format!("panicked: {}", panic_message(&panic))),
                    };
                    (None, failed, None)
                }
            };
            if let Some(text) = failed {
                let attribution = Attribution {
                    context,
                    ..self.attribution(current.generation())
                };
                let message = format!("event '{name}' handler failed: {text}");
                let mut diagnostic =
                    Diagnostic::new(DiagnosticKind::HandlerFailed, attribution, message);
                diagnostic.event = Some(name.to_string());
                diagnostic.source = source;
                reporting.diagnose(Severity::Error, &diagnostic);
                errors.push(diagnostic);
            }
        }
        !due.is_empty()
    }
}

/// A named handler's arguments in `lua`: a copy of the payload, then the name, whose Luau
/// string is made once for a run of events of that name.
fn named_args(
    lua: &Lua,
    name: &Arc<str>,
    name_string: &mut Option<(Arc<str>, Value)>,
    payload: &Message,
) -> std::result::Result<MultiValue, String> {
    let unreadable =
        |e: mlua::Error| format!("its arguments could not be read: {}", vm::error_message(&e));
    let payload = payload.to_lua(lua).map_err(unreadable)?;
    let name_value = match name_string {
        Some((cached, value)) if Arc::ptr_eq(cached, name) || **cached == **name => value.clone(),
        _ => {
            let value = Value::String(lua.create_string(&**name).map_err(unreadable)?);
            *name_string = Some((name.clone(), value.clone()));
            value
        }
    };
    let mut values = MultiValue::with_capacity(2);
    values.push_back(payload);
    values.push_back(name_value);
    Ok(values)
}

/// The refusal of a host call (`entry`) whose event name the queue refused.
fn event_name_refused(entry: &str, refused: &PostRefused) -> Error {
    Error::Name {
        refusal: NameRefusal::EventName,
        message: format!("{entry}: {refused}"),
    }
}
