//! The domain's engine services inside an actor spawned with `shareServices = true`.
//!
//! A pool worker's VM parks the calling task on a promise and the pool thread runs other work
//! meanwhile. An actor has a thread of its own and nothing else to run, so its query
//! stub is a plain Rust function that posts the query to the domain's mailbox and blocks the
//! actor's thread until the engine thread answers. The block is bounded twice over: never
//! past what is left of the calling run's budget (the error is the one a loop past its budget
//! gets), and never past the end of the generation (the domain stops or restarts, or tears the
//! actor down), so a join at teardown always finishes.
//!
//! A command is posted at once, in call order behind the actor's earlier queries and
//! commands; the engine thread applies it when it next drains its mailbox (its next frame).
//! Both carry the authority of the running handler (the actor's grant, attributed to the
//! actor), so a service's `require_capability` answers for the actor; a command's declared
//! capability is checked under it as the call is made, before anything is posted.
//!
//! This module owns only the actor side; the engine side is `domain::services`.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mlua::{Function, Lua};

use crate::jobs::{self, DomainEvent, OutcomeSlot, PrincipalShared, Query, ReplyTo, ServiceKind};
use crate::principal::capability::{self, CapabilityId};
use crate::value::{Message, MessageArgs};
use crate::vm::{self, CancelToken};

/// How often a blocked query looks at the teardown flag and the generation.
const LOOK: Duration = Duration::from_millis(10);

/// What an actor's service stubs share: the generation they reach and how they learn that the
/// actor is being torn down.
pub(crate) struct ServiceLink {
    pub(crate) principal: Arc<PrincipalShared>,
    pub(crate) cancel: Arc<CancelToken>,
    pub(crate) actor: String,
    /// Set when a query was cut short by the end of the generation: the text the actor's
    /// failure reports (a teardown is otherwise no failure).
    pub(crate) cut: RefCell<Option<String>>,
    /// How many of the principal's service names this VM has installed.
    installed: Cell<usize>,
}

impl ServiceLink {
    pub(crate) fn new(
        principal: Arc<PrincipalShared>,
        cancel: Arc<CancelToken>,
        actor: String,
    ) -> Rc<ServiceLink> {
        Rc::new(ServiceLink {
            principal,
            cancel,
            actor,
            cut: RefCell::default(),
            installed: Cell::new(0),
        })
    }

    /// Installs the services registered since the last call (names only grow). Answers the
    /// names that could not be installed, each with why.
    pub(crate) fn install_new(self: &Rc<Self>, lua: &Lua) -> Vec<String> {
        let from = self.installed.get();
        if self.principal.services.len() == from {
            return Vec::new();
        }
        let new = self.principal.services.since(from);
        self.installed.set(from + new.len());
        let mut refused = Vec::new();
        for (name, kind) in new {
            let made = match kind {
                ServiceKind::Query => self.query(lua, name.clone()),
                ServiceKind::Command { requires } => self.command(lua, name.clone(), requires),
            };
            let installed = made
                .map_err(|e| vm::error_message(&e))
                .and_then(|f| jobs::install_at(lua, &name, f));
            if let Err(e) = installed {
                refused.push(e);
            }
        }
        refused
    }

    /// Why the generation is over, if it is: the text a cut-short query raises.
    fn ended(&self, service: &str) -> Option<String> {
        let torn_down = self.cancel.load(Ordering::Acquire);
        if self.principal.is_alive() && !torn_down {
            return None;
        }
        Some(format!(
            "{service}: worker '{}' waited for the engine's answer, but the domain ended it: {}",
            self.actor,
            self.principal.end_reason()
        ))
    }

    fn query(self: &Rc<Self>, lua: &Lua, name: Arc<str>) -> mlua::Result<Function> {
        let link = self.clone();
        lua.create_function(move |_, args: MessageArgs| {
            let args = jobs::read_args(&name, args)?;
            link.ask(&name, args)
        })
    }

    /// Posts one query and blocks this thread for its answer.
    fn ask(&self, name: &Arc<str>, args: Message) -> mlua::Result<Message> {
        // The budget is read before posting: the wait may not outlast the run that asks.
        let limit = vm::run_left().map(|(left, budget)| (Instant::now() + left, budget));
        let slot = OutcomeSlot::new();
        let posted = self
            .principal
            .mailbox
            .send(DomainEvent::Query(Box::new(Query {
                service: name.clone(),
                args,
                commands: Vec::new(),
                reply: ReplyTo::Slot(slot.clone()),
                job: None,
                authority: capability::current_arc(),
            })));
        if !posted {
            return Err(mlua::Error::runtime(format!(
                "{name}: the domain has stopped: {}",
                self.principal.end_reason()
            )));
        }
        let mut answer = jobs::Promise::new(slot);
        loop {
            if let Some(text) = self.ended(name) {
                *self.cut.borrow_mut() = Some(text.clone());
                return Err(mlua::Error::runtime(text));
            }
            let mut look = LOOK;
            if let Some((at, budget)) = limit {
                let left = at.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(mlua::Error::runtime(
                        vm::DeadlineMessage(budget).to_string(),
                    ));
                }
                look = look.min(left);
            }
            match answer.wait_timeout(look) {
                None => continue,
                Some(Ok(Message::List(mut pair))) if pair.len() == 2 => {
                    let value = pair.pop().unwrap_or(Message::Nil);
                    return match pair.pop() {
                        Some(Message::Boolean(true)) => Ok(value),
                        _ => Err(mlua::Error::runtime(match value {
                            Message::String(text) => String::from_utf8_lossy(&text).into_owned(),
                            other => format!("{other:?}"),
                        })),
                    };
                }
                Some(Ok(other)) => {
                    return Err(mlua::Error::runtime(format!(
                        "{name}: the engine answered {other:?}, not a query's answer"
                    )))
                }
                Some(Err(e)) => return Err(mlua::Error::runtime(format!("{name}: {e}"))),
            }
        }
    }

    fn command(
        self: &Rc<Self>,
        lua: &Lua,
        name: Arc<str>,
        requires: Option<CapabilityId>,
    ) -> mlua::Result<Function> {
        let link = self.clone();
        lua.create_function(move |_, args: MessageArgs| {
            let args = jobs::read_args(&name, args)?;
            // Checked as the call is made, as a worker's command stub checks: a refused call
            // is never posted.
            jobs::check_requirement(&name, requires.as_ref()).map_err(mlua::Error::runtime)?;
            let posted = link.principal.mailbox.send(DomainEvent::Apply {
                commands: vec![(name.clone(), args)],
                then: None,
                authority: capability::current_arc(),
            });
            if posted {
                Ok(())
            } else {
                Err(mlua::Error::runtime(format!(
                    "{name}: the domain has stopped: {}",
                    link.principal.end_reason()
                )))
            }
        })
    }
}
