//! The engine thread's side of domain events: the handlers bound to names (`@skein/events`'s
//! `on`, [`ScriptDomain::bind_event_handler`]), `emit`, routes to other domains, and the drain
//! that delivers queued events ([`ScriptDomain::drain_events`]).
//!
//! Raw events go to the `event` phase handlers of their target context(s) through the
//! scheduler; named events go to the handlers bound to their name, and nothing else: a name is
//! never a phase, so `emit("startup")` runs only handlers bound to `startup`. The queue itself
//! (limits, generations) is `event_queue.rs`; the engine events `engine.on` watchers see are a
//! different thing (`jobs/events.rs`).

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;

use mlua::{Function, Lua, Table, Value};

use super::context::{ContextSpec, Phase};
use super::diagnostic::{Attribution, Diagnostic, DiagnosticKind};
use super::event_queue::{EventQueue, PostRefused, QueuedEvent};
use super::{Report, ScriptDomain};
use crate::error::{Error, Result};
use crate::jobs::{DomainId, DomainMailbox, Generation};
use crate::value::{Message, TransferErrorKind};
use crate::vm::{self, panic_message};

/// Registry key of the engine VM's `@skein/events` table.
pub(crate) const EVENTS_KEY: &str = "skein.events";

/// What `events.on` raises outside the engine VM.
pub(crate) const WORKER_ON: &str =
    "events.on: handlers bind only in the engine VM; a worker VM runs jobs, not event handlers";

/// What `events.emit` raises outside the engine VM.
pub(crate) const WORKER_EMIT: &str =
    "events.emit: events are emitted from the engine VM; a worker VM hands its results back instead";

/// What one drain of the event queue did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventReport {
    /// Events that reached at least one handler.
    pub delivered: usize,
    /// Events nothing handled: counted here and dropped.
    pub unhandled: usize,
    /// Events still waiting after the drain (queued during it, or past `per_drain`).
    pub pending: usize,
    /// Handlers that failed during the drain, and the named events `emit` refused since the
    /// last drain (`queue full`), in the order they happened within each.
    pub errors: Vec<Diagnostic>,
    /// Copies a route could not deliver since the last drain (the recipient was stopped or
    /// full): the emitter's domain is told, the emitter is not failed.
    pub warnings: Vec<Diagnostic>,
}

type HostHandler = Rc<RefCell<Box<dyn FnMut(Message) -> std::result::Result<(), String>>>>;

/// A handler bound to a name.
#[derive(Clone)]
enum NamedHandler {
    /// A function of the engine VM, bound in `context` when one was named.
    Luau {
        function: Function,
        context: Option<usize>,
    },
    /// The host's.
    Host(HostHandler),
}

struct NamedBinding {
    id: u64,
    priority: i32,
    handler: NamedHandler,
}

/// The named-event handlers of a domain, its routes and the diagnostics `emit` recorded.
pub(crate) struct EventHandlers {
    queue: Arc<EventQueue>,
    /// The domain's name, for attributions.
    domain_name: String,
    domain: DomainId,
    generation: Cell<Generation>,
    /// The host's contexts' names and priorities, for `events.on(name, fn, context)`.
    contexts: Box<[(String, i32)]>,
    next_id: Cell<u64>,
    /// Each name's handlers in run order: priority (higher first), then bind order.
    named: RefCell<BTreeMap<Arc<str>, Vec<NamedBinding>>>,
    routes: RefCell<Vec<(Arc<str>, DomainMailbox)>>,
    errors: RefCell<Vec<Diagnostic>>,
    warnings: RefCell<Vec<Diagnostic>>,
}

impl EventHandlers {
    pub(crate) fn new(
        queue: Arc<EventQueue>,
        domain_name: &str,
        domain: DomainId,
        generation: Generation,
        contexts: &[ContextSpec],
    ) -> Rc<EventHandlers> {
        Rc::new(EventHandlers {
            queue,
            domain_name: domain_name.to_owned(),
            domain,
            generation: Cell::new(generation),
            contexts: contexts
                .iter()
                .map(|c| (c.name().to_owned(), c.get_priority()))
                .collect(),
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

    /// A new generation: the Luau handlers were functions of the old engine VM and go; the
    /// host's handlers and routes stay.
    pub(crate) fn next_generation(&self, generation: Generation) {
        self.generation.set(generation);
        for list in self.named.borrow_mut().values_mut() {
            list.retain(|b| matches!(b.handler, NamedHandler::Host(_)));
        }
        self.named.borrow_mut().retain(|_, list| !list.is_empty());
    }

    fn attribution(&self, context: Option<&str>) -> Attribution {
        Attribution {
            domain_name: self.domain_name.clone(),
            domain: self.domain,
            generation: self.generation.get(),
            context: context.map(str::to_owned),
            worker: None,
        }
    }

    fn bind(&self, name: &str, priority: i32, handler: NamedHandler) -> u64 {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        let mut named = self.named.borrow_mut();
        let list = named.entry(Arc::from(name)).or_default();
        let at = list.partition_point(|b| b.priority >= priority);
        list.insert(
            at,
            NamedBinding {
                id,
                priority,
                handler,
            },
        );
        id
    }

    fn unbind(&self, name: &str, id: u64) -> bool {
        let mut named = self.named.borrow_mut();
        let Some(list) = named.get_mut(name) else {
            return false;
        };
        let before = list.len();
        list.retain(|b| b.id != id);
        let removed = list.len() != before;
        if list.is_empty() {
            named.remove(name);
        }
        removed
    }

    /// The handlers of `name` in run order: a snapshot, so binding or removing during a
    /// delivery counts from the next event on.
    fn due(&self, name: &str) -> Vec<NamedHandler> {
        self.named
            .borrow()
            .get(name)
            .map(|list| list.iter().map(|b| b.handler.clone()).collect())
            .unwrap_or_default()
    }

    /// Records a `queue full` refusal of `emit` and answers the error it raises.
    fn refuse(&self, refused: &str) -> mlua::Error {
        let message = format!("events.emit: {refused}");
        self.errors.borrow_mut().push(Diagnostic {
            attribution: self.attribution(None),
            kind: DiagnosticKind::EmitRefused,
            phase: None,
            message: message.clone(),
            capability: None,
        });
        mlua::Error::runtime(message)
    }

    /// `events.emit(name, payload)`: queues the event here, then a copy on every route of the
    /// name.
    fn emit(&self, name: Value, payload: Value) -> mlua::Result<()> {
        let name = match name {
            Value::String(s) => s.to_str()?.to_owned(),
            other => {
                return Err(mlua::Error::runtime(format!(
                    "events.emit: name must be a string, got {}",
                    vm::a_type(&other)
                )))
            }
        };
        let limits = self.queue.limits();
        if let Err(refused) = self.queue.check_name(&name, Message::Nil) {
            return Err(mlua::Error::runtime(format!("events.emit: {refused}")));
        }
        let (events_free, bytes_free) = self.queue.room();
        if events_free == 0 {
            return Err(self.refuse(&full(super::QueueBound::Pending, limits.pending)));
        }
        // The payload is read only as far as the room left: a vast table is refused part way.
        let room = bytes_free.saturating_sub(name.len());
        let payload = match Message::read_within(&payload, "payload", room) {
            Ok(m) => m,
            Err(e) if matches!(e.reason, TransferErrorKind::TooLarge { .. }) => {
                return Err(self.refuse(&full(super::QueueBound::Bytes, limits.bytes)));
            }
            Err(e) => return Err(mlua::Error::runtime(format!("events.emit: {e}"))),
        };
        let routes: Vec<DomainMailbox> = self
            .routes
            .borrow()
            .iter()
            .filter(|(n, _)| **n == *name)
            .map(|(_, m)| m.clone())
            .collect();
        let copy = (!routes.is_empty()).then(|| payload.clone());
        match self.queue.push_named(self.generation.get(), &name, payload) {
            Ok(()) => {}
            Err(refused @ PostRefused::Full { .. }) => {
                return Err(self.refuse(&refused.to_string()))
            }
            Err(refused) => return Err(mlua::Error::runtime(format!("events.emit: {refused}"))),
        }
        if let Some(copy) = copy {
            for mailbox in routes {
                if let Err(refused) = mailbox.post_named(&name, copy.clone()) {
                    self.warnings.borrow_mut().push(Diagnostic {
                        attribution: self.attribution(None),
                        kind: DiagnosticKind::RouteUndelivered,
                        phase: None,
                        message: format!(
                            "warning: route '{name}' to {}: the copy was not delivered: {refused}",
                            mailbox_label(&mailbox)
                        ),
                        capability: None,
                    });
                }
            }
        }
        Ok(())
    }

    /// `events.on(name, fn, context?)`: binds `fn` and answers its remover.
    fn on(
        self: &Rc<Self>,
        lua: &Lua,
        name: Value,
        handler: Value,
        context: Value,
    ) -> mlua::Result<Function> {
        let name = match name {
            Value::String(s) => s.to_str()?.to_owned(),
            other => {
                return Err(mlua::Error::runtime(format!(
                    "events.on: name must be a string, got {}",
                    vm::a_type(&other)
                )))
            }
        };
        if let Err(refused) = self.queue.check_name(&name, Message::Nil) {
            return Err(mlua::Error::runtime(format!("events.on: {refused}")));
        }
        let Value::Function(function) = handler else {
            return Err(mlua::Error::runtime(format!(
                "events.on: the handler must be a function, got {}",
                vm::a_type(&handler)
            )));
        };
        let (context, priority) = match context {
            Value::Nil => (None, 0),
            Value::String(s) => {
                let wanted = s.to_str()?;
                let Some(index) = self.contexts.iter().position(|(n, _)| *n == *wanted) else {
                    return Err(mlua::Error::runtime(format!(
                        "events.on: no context named '{}' is declared",
                        &*wanted
                    )));
                };
                (Some(index), self.contexts[index].1)
            }
            other => {
                return Err(mlua::Error::runtime(format!(
                    "events.on: context must be a string, got {}",
                    vm::a_type(&other)
                )))
            }
        };
        let id = self.bind(&name, priority, NamedHandler::Luau { function, context });
        let weak = Rc::downgrade(self);
        lua.create_function(move |_, ()| {
            Ok(weak
                .upgrade()
                .map(|handlers| handlers.unbind(&name, id))
                .unwrap_or(false))
        })
    }
}

fn full(bound: super::QueueBound, limit: usize) -> String {
    PostRefused::Full {
        bound,
        limit,
        payload: Message::Nil,
    }
    .to_string()
}

fn mailbox_label(mailbox: &DomainMailbox) -> String {
    format!("a domain (generation {})", mailbox.generation().get())
}

/// Installs `@skein/events` in the engine VM: `require("@skein/events")` answers it.
pub(crate) fn install_events_module(lua: &Lua, handlers: &Rc<EventHandlers>) -> mlua::Result<()> {
    let module: Table = lua.create_table()?;
    let store = handlers.clone();
    module.raw_set(
        "emit",
        lua.create_function(move |_, (name, payload): (Value, Value)| store.emit(name, payload))?,
    )?;
    let store = handlers.clone();
    module.raw_set(
        "on",
        lua.create_function(
            move |lua, (name, handler, context): (Value, Value, Value)| {
                store.on(lua, name, handler, context)
            },
        )?,
    )?;
    module.set_readonly(true);
    lua.set_named_registry_value(EVENTS_KEY, module)
}

/// `@skein/events` as a VM without one (a worker VM) sees it: both functions raise.
pub(crate) fn events_module(lua: &Lua) -> mlua::Result<Value> {
    crate::vm::registered_or_refusing(lua, EVENTS_KEY, &[("on", WORKER_ON), ("emit", WORKER_EMIT)])
}

impl ScriptDomain {
    /// Delivers what waits in the event queue, at most
    /// [`EventLimits::per_drain`](crate::EventLimits::per_drain) events, in the order they were
    /// queued. [`advance`](Self::advance) does this once, before its phases.
    ///
    /// A raw event runs the `event` phase handlers of its target context(s) with the payload;
    /// a named event runs every handler bound to its name with the payload and the name, in
    /// scheduler order (context priority, then bind order). Events queued while the drain runs
    /// wait for the next one. An event nothing handles is counted in
    /// [`EventReport::unhandled`] and dropped. A failing handler is a [`Diagnostic`] in the
    /// report, and the next one runs.
    ///
    /// ```
    /// use skein::{DomainSpec, Message, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let domain = ScriptDomain::new(&pool, DomainSpec::new("game"))?;
    /// domain.exec(r#"
    ///     local events = require("@skein/events")
    ///     events.on("hit", function(damage) hp = (hp or 100) - damage end)
    ///     events.emit("hit", 30)
    ///     events.emit("nobody listens", true)
    /// "#)?;
    /// let report = domain.drain_events();
    /// assert_eq!((report.delivered, report.unhandled, report.pending), (1, 1, 0));
    /// assert_eq!(domain.eval("return hp")?, Message::Integer(70));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// A stopped domain drains nothing; a drain asked for from inside one of the domain's own
    /// handlers drains nothing and is recorded as a [`Report`](crate::Report) naming
    /// [`Error::Reentrant`].
    pub fn drain_events(&self) -> EventReport {
        match self.enter("drain_events") {
            Ok(_entered) => self.run_event_drain(),
            Err(e) => {
                if matches!(e, Error::Reentrant(_)) {
                    self.reports.borrow_mut().push(Report {
                        source: "drain_events".to_owned(),
                        message: e.to_string(),
                    });
                }
                EventReport {
                    pending: self.pending_events(),
                    ..EventReport::default()
                }
            }
        }
    }

    /// How many events wait in the queue.
    pub fn pending_events(&self) -> usize {
        self.event_handlers.queue().pending().0
    }

    /// The bytes the waiting events weigh, as [`EventLimits`](crate::EventLimits) counts them.
    pub fn pending_event_bytes(&self) -> usize {
        self.event_handlers.queue().pending().1
    }

    /// Binds a host handler to the named event `name`: each delivery calls `f` with a copy of
    /// the payload. Host handlers run after Luau handlers of higher-priority contexts and in
    /// bind order with the others (their priority is 0), and they stay bound across restarts:
    /// they are the host's. An `Err` or a panic (contained) is a [`Diagnostic`] of the drain.
    ///
    /// ```
    /// use std::{cell::RefCell, rc::Rc};
    /// use skein::{DomainSpec, Message, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let domain = ScriptDomain::new(&pool, DomainSpec::new("game"))?;
    /// let seen = Rc::new(RefCell::new(Vec::new()));
    /// let sink = seen.clone();
    /// domain.bind_event_handler("saved", move |m| Ok(sink.borrow_mut().push(m)))?;
    /// domain.exec(r#"require("@skein/events").emit("saved", "slot 1")"#)?;
    /// domain.drain_events();
    /// assert_eq!(*seen.borrow(), [Message::String("slot 1".into())]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Refused`] when the name is empty or longer than
    /// [`EventLimits::name`](crate::EventLimits::name).
    pub fn bind_event_handler<F>(&self, name: &str, f: F) -> Result<()>
    where
        F: FnMut(Message) -> std::result::Result<(), String> + 'static,
    {
        let handlers = &self.event_handlers;
        handlers
            .queue()
            .check_name(name, Message::Nil)
            .map_err(|e| Error::Refused(format!("bind_event_handler: {e}")))?;
        handlers.bind(
            name,
            0,
            NamedHandler::Host(Rc::new(RefCell::new(Box::new(f)))),
        );
        Ok(())
    }

    /// Routes the named event `name`: every time this domain's scripts emit it, a copy is also
    /// posted to `mailbox` (another domain's), as
    /// [`post_named`](crate::DomainMailbox::post_named) would. Nothing crosses unless the host
    /// routes it. A recipient that is stopped or full is not the emitter's error: it becomes a
    /// warning in this domain's next [`EventReport`]. Routes are the host's and stay across
    /// restarts.
    ///
    /// ```
    /// use skein::{DomainSpec, Message, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let game = ScriptDomain::new(&pool, DomainSpec::new("game"))?;
    /// let audio = ScriptDomain::new(&pool, DomainSpec::new("audio"))?;
    /// audio.exec(r#"require("@skein/events").on("boom", function(v) volume = v end)"#)?;
    /// game.route("boom", audio.mailbox())?;
    /// game.exec(r#"require("@skein/events").emit("boom", 11)"#)?;
    /// assert_eq!(audio.drain_events().delivered, 1);
    /// assert_eq!(audio.eval("return volume")?, Message::Integer(11));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Refused`] when the name is empty or longer than
    /// [`EventLimits::name`](crate::EventLimits::name).
    pub fn route(&self, name: &str, mailbox: DomainMailbox) -> Result<()> {
        let handlers = &self.event_handlers;
        handlers
            .queue()
            .check_name(name, Message::Nil)
            .map_err(|e| Error::Refused(format!("route: {e}")))?;
        handlers
            .routes
            .borrow_mut()
            .push((Arc::from(name), mailbox));
        Ok(())
    }

    /// One drain, inside a scheduler entry.
    pub(super) fn run_event_drain(&self) -> EventReport {
        let handlers = self.event_handlers.clone();
        self.drain_stale();
        let batch = handlers.queue().take(handlers.queue().limits().per_drain);
        let mut report = EventReport::default();
        for envelope in batch {
            if envelope.generation != self.generation() {
                // A restart clears the queue, so this is only a post that raced it.
                self.count_stale(1);
                continue;
            }
            let handled = match envelope.event {
                QueuedEvent::Raw { target, payload } => {
                    let only = match &target {
                        super::EventTarget::All => None,
                        super::EventTarget::Context(name) => {
                            match self.contexts().iter().position(|c| c.name() == name) {
                                Some(index) => Some(index),
                                None => {
                                    report.unhandled += 1;
                                    continue;
                                }
                            }
                        }
                    };
                    let phase = self.broadcast_in(Phase::Event, only, &[payload]);
                    report.errors.extend(phase.errors);
                    phase.calls > 0
                }
                QueuedEvent::Named { name, payload } => {
                    self.deliver_named(&handlers, &name, payload, &mut report.errors)
                }
            };
            if handled {
                report.delivered += 1;
            } else {
                report.unhandled += 1;
            }
        }
        let refused = std::mem::take(&mut *handlers.errors.borrow_mut());
        let warnings = std::mem::take(&mut *handlers.warnings.borrow_mut());
        for d in &refused {
            self.diagnose(super::Severity::Error, d);
        }
        for d in &warnings {
            self.diagnose(super::Severity::Warning, d);
        }
        report.errors.extend(refused);
        report.warnings = warnings;
        report.pending = self.pending_events();
        report
    }

    /// Calls every handler of `name`; answers whether there was one.
    fn deliver_named(
        &self,
        handlers: &EventHandlers,
        name: &str,
        payload: Message,
        errors: &mut Vec<Diagnostic>,
    ) -> bool {
        let due = handlers.due(name);
        for handler in &due {
            let (context, failed) = match handler {
                NamedHandler::Luau { function, context } => {
                    let context_index = *context;
                    let context = context.map(|i| &self.contexts()[i]);
                    let label = match context {
                        Some(spec) => format!("context '{}' event '{name}' handler", spec.name()),
                        None => format!("event '{name}' handler"),
                    };
                    let deadline = context
                        .and_then(ContextSpec::get_budget)
                        .unwrap_or(self.principal.max_deadline);
                    let args = [
                        payload.clone(),
                        Message::String(bytes::Bytes::copy_from_slice(name.as_bytes())),
                    ];
                    let call = std::time::Instant::now();
                    let authority = context_index
                        .map(|i| self.bindings.authority(i, &self.principal.authority));
                    let failed = self.call_task(label, deadline, authority, function, &args);
                    if self.principal.profile.is_some() {
                        let context = context.map(ContextSpec::name);
                        let kind = super::profile::ProfileKind::ContextCall;
                        let event = Some(format!("{}.event '{name}'", context.unwrap_or("")));
                        self.profiled(kind, context, event, call);
                    }
                    (context.map(|c| c.name().to_owned()), failed)
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
                    (None, failed)
                }
            };
            if let Some(text) = failed {
                let diagnostic = Diagnostic {
                    attribution: Attribution {
                        domain_name: self.name.clone(),
                        domain: self.id(),
                        generation: self.generation(),
                        context,
                        worker: None,
                    },
                    kind: DiagnosticKind::HandlerFailed,
                    phase: None,
                    message: format!("event '{name}' handler failed: {text}"),
                    capability: None,
                };
                self.diagnose(super::Severity::Error, &diagnostic);
                errors.push(diagnostic);
            }
        }
        !due.is_empty()
    }
}
