//! The engine thread's side of engine services: the host's functions, how the engine VM calls
//! them directly, and how forwarded queries and recorded commands are served from the mailbox.
//!
//! The functions never leave the engine thread, so they need not be `Send`. Worker VMs know only
//! the names (`jobs::ServiceKind` in the principal); what they send here is plain data.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use mlua::Lua;

use crate::value::Message;
use crate::vm::{panic_message, ServiceCall};

type QueryFn = Box<dyn Fn(Message) -> Result<Message, String>>;
type CommandFn = RefCell<Box<dyn FnMut(Message) -> Result<(), String>>>;

/// One service the host registered.
pub(crate) enum Service {
    Query(QueryFn),
    Command(CommandFn),
}

/// What one frame did, as [`ScriptDomain::frame`](crate::ScriptDomain::frame) answers it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrameReport {
    /// The frame's number: the domain's frame counter after this frame (the first is 1).
    pub frame: u64,
    /// Queries forwarded from workers that this frame answered.
    pub forwarded_calls: u64,
    /// Commands recorded on workers that this frame applied.
    pub commands_applied: u64,
    /// The sum of the `dt` the host passed to `frame` so far.
    pub time: Duration,
}

/// The host's services on one domain, and this frame's counts.
#[derive(Default)]
pub(crate) struct EngineServices {
    map: RefCell<HashMap<Arc<str>, Rc<Service>>>,
    pub(crate) forwarded: Cell<u64>,
    pub(crate) applied: Cell<u64>,
}

impl EngineServices {
    pub(crate) fn contains(&self, name: &str) -> bool {
        self.map.borrow().contains_key(name)
    }

    pub(crate) fn insert(&self, name: Arc<str>, service: Service) {
        self.map.borrow_mut().insert(name, Rc::new(service));
    }

    /// Runs service `name` on `args`, containing a panic. Answers the query's value (`None` for
    /// a command) or the error text, naming the service.
    pub(crate) fn call(&self, name: &str, args: Message) -> Result<Option<Message>, String> {
        let service = self.map.borrow().get(name).cloned();
        let Some(service) = service else {
            return Err(format!("engine service '{name}' is not registered"));
        };
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match &*service {
            Service::Query(f) => f(args).map(Some),
            Service::Command(f) => match f.try_borrow_mut() {
                Ok(mut f) => f(args).map(|()| None),
                Err(_) => Err("it was called again while it ran".to_owned()),
            },
        }));
        match ran {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => Err(format!("engine service '{name}' failed: {e}")),
            Err(payload) => Err(format!(
                "engine service '{name}' panicked: {}",
                panic_message(&payload)
            )),
        }
    }

    /// Runs a forwarded query: the answer a worker's stub unwraps, `{ true, answer }` or
    /// `{ false, error }`.
    pub(crate) fn answer(&self, name: &str, args: Message) -> Message {
        self.forwarded.set(self.forwarded.get() + 1);
        let is_query = matches!(
            self.map.borrow().get(name).map(|s| &**s),
            Some(Service::Query(_))
        );
        let result = if is_query {
            self.call(name, args)
        } else {
            Err(format!("engine service '{name}' is not a query"))
        };
        match result {
            Ok(answer) => {
                Message::List(vec![Message::Boolean(true), answer.unwrap_or(Message::Nil)])
            }
            Err(e) => Message::List(vec![Message::Boolean(false), Message::String(e.into())]),
        }
    }

    /// Applies recorded commands in order; answers the failures, each naming its service.
    pub(crate) fn apply(&self, commands: Vec<ServiceCall>) -> Vec<String> {
        let mut failures = Vec::new();
        for (name, args) in commands {
            self.applied.set(self.applied.get() + 1);
            if let Err(e) = self.call(&name, args) {
                failures.push(e);
            }
        }
        failures
    }
}

/// The engine VM's function for service `name`: it calls the host's function directly.
pub(crate) fn engine_function(
    lua: &Lua,
    services: Rc<EngineServices>,
    name: Arc<str>,
) -> mlua::Result<mlua::Function> {
    lua.create_function(move |_, args: crate::value::MessageArgs| {
        let args = crate::jobs::read_args(&name, args)?;
        match services.call(&name, args) {
            Ok(answer) => Ok(answer.unwrap_or(Message::Nil)),
            Err(e) => Err(mlua::Error::runtime(e)),
        }
    })
}
