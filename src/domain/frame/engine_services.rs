//! The engine thread's side of engine services: the host's functions, how the engine VM calls
//! them directly, and how forwarded queries and recorded commands are served from the mailbox.
//!
//! The functions never leave the engine thread, so they need not be `Send`. Worker VMs know only
//! the names (`jobs::ServiceKind` in the principal); what they send here is plain data.
//!
//! [`EngineServices`] is the `FrameDriver` (`driver.rs`)'s: the host's services
//! outlive generations, and each new engine VM gets them installed again. Its invariants: a
//! name is registered once, for good (a served-only query may be replaced); a service is in the
//! map only once its path is installed in the engine VM and its name is among the principal's
//! services, so a worker never sees a name the engine can't answer; a panic of a service is
//! contained and answered as its failure; the capability a command requires is checked once
//! per call, where the call is made (here for the engine VM's calls, in the stub for a worker's
//! or an actor's), never again when a recorded call is applied.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use mlua::Lua;

use super::service_error::ServiceError;
use crate::domain::Report;
use crate::error::{Error, NameRefusal, Result};
use crate::jobs::{self, PrincipalShared};
use crate::principal::capability::CapabilityId;
use crate::value::{FromMessage, IntoMessage, Message, MessageArgs};
use crate::vm::{panic_message, ServiceCall};

type QueryFn = Box<dyn Fn(Message) -> Result<Message, String>>;
type CommandFn = RefCell<Box<dyn FnMut(Message) -> Result<(), String>>>;

/// One service the host registered.
pub(crate) enum Service {
    Query(QueryFn),
    Command {
        run: CommandFn,
        /// The capability its caller must hold, checked where the call is made.
        requires: Option<CapabilityId>,
    },
}

impl Service {
    /// A query of `f`, which takes its arguments as any [`FromMessage`] type and answers any
    /// [`IntoMessage`] one: an argument or an answer that does not convert is its failure.
    pub(crate) fn typed_query<A, R, F>(f: F) -> Service
    where
        A: FromMessage,
        R: IntoMessage,
        F: Fn(A) -> std::result::Result<R, ServiceError> + 'static,
    {
        let query = move |args: Message| {
            let answer = f(typed_args(args)?).map_err(ServiceError::into_text)?;
            answer
                .into_message()
                .map_err(|e| format!("its answer: {e}"))
        };
        Service::Query(Box::new(query))
    }

    /// A command of `f`, which takes its arguments as any [`FromMessage`] type; its callers
    /// must hold `requires`, when it is given.
    pub(crate) fn typed_command<A, F>(mut f: F, requires: Option<CapabilityId>) -> Service
    where
        A: FromMessage,
        F: FnMut(A) -> std::result::Result<(), ServiceError> + 'static,
    {
        let command = move |args: Message| f(typed_args(args)?).map_err(ServiceError::into_text);
        Service::Command {
            run: RefCell::new(Box::new(command)),
            requires,
        }
    }

    /// What the worker side needs to know of it.
    fn kind(&self) -> jobs::ServiceKind {
        match self {
            Service::Query(_) => jobs::ServiceKind::Query,
            Service::Command { requires, .. } => jobs::ServiceKind::Command {
                requires: requires.clone(),
            },
        }
    }
}

/// What one frame did, as [`ScriptDomain::frame`](crate::ScriptDomain::frame) answers it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FrameReport {
    /// The frame's number: the domain's frame counter after this frame (the first is 1).
    pub frame: u64,
    /// Queries forwarded from workers that this frame answered (for an `advance`, the whole
    /// advance: its phases' joins too).
    pub forwarded_calls: u64,
    /// Commands recorded on workers that this frame applied.
    pub commands_applied: u64,
    /// The sum of the `dt` the host passed to `frame` so far.
    pub time: Duration,
    /// The reports made during this frame (a main script or task that raised, a registered
    /// job that failed, ...), oldest first. They are copies: the same reports wait in
    /// [`take_reports`](crate::ScriptDomain::take_reports) until taken, so a host reads one or
    /// the other. Past [`Report::MAX_KEPT`](crate::Report::MAX_KEPT) waiting, new ones are
    /// counted, not kept, and not here either.
    pub reports: Vec<Report>,
}

impl FrameReport {
    /// How many more mailbox drains a frame makes, at most, after one that answered forwarded
    /// queries: 16 (see [`ScriptDomain::frame`](crate::ScriptDomain::frame)).
    pub const FOLLOW_UP_DRAINS: u32 = 16;

    /// The longest a frame waits, in all, for the follow-ups of the forwarded queries it
    /// answered: 2 ms. A frame that answered none, or whose engine VM has no task waiting on
    /// pool work, never waits.
    pub const FOLLOW_UP_WAIT: Duration = Duration::from_millis(2);

    /// The longest a wave of registered jobs waits for the pool items it started before the
    /// phase's next wave starts: 100 ms, or the domain's run deadline when that is shorter (see
    /// [`ScriptDomain::frame`](crate::ScriptDomain::frame)). An item still running then is
    /// reported and applies in a later frame: an item that waits across frames
    /// (`task.waitFrames`, a promise the engine settles) costs a frame this once.
    pub const WAVE_WAIT: Duration = Duration::from_millis(100);
}

/// The host's services on one domain, and this frame's counts.
#[derive(Default)]
pub(crate) struct EngineServices {
    map: RefCell<HashMap<Arc<str>, Rc<Service>>>,
    pub(crate) forwarded: Cell<u64>,
    pub(crate) applied: Cell<u64>,
    /// Promises of the engine VM settled from the mailbox, over the domain's life.
    pub(crate) settled: Cell<u64>,
}

impl EngineServices {
    pub(crate) fn contains(&self, name: &str) -> bool {
        self.map.borrow().contains_key(name)
    }

    pub(crate) fn insert(&self, name: Arc<str>, service: Service) {
        self.map.borrow_mut().insert(name, Rc::new(service));
    }

    /// Registers `service` as `name`: installs its function at that dotted path of `lua` (the
    /// current engine VM), adds the name to `principal`'s services (so worker VMs forward it),
    /// and keeps it.
    ///
    /// # Errors
    /// [`Error::Name`] naming the [`NameRefusal`]: a name that is not 1 to 256 bytes of dotted
    /// Luau identifiers, one registered already, or a path taken in `lua`.
    pub(crate) fn register(
        self: &Rc<Self>,
        lua: &Lua,
        principal: &PrincipalShared,
        name: &str,
        service: Service,
    ) -> Result<()> {
        let kind = service.kind();
        let refused = |refusal, message| Error::Name { refusal, message };
        jobs::check_service_name(name).map_err(|e| refused(NameRefusal::ServiceName, e))?;
        if self.contains(name) {
            return Err(refused(
                NameRefusal::ServiceTaken,
                format!("register: engine service '{name}' is registered already"),
            ));
        }
        let name: Arc<str> = Arc::from(name);
        let f = engine_function(lua, self.clone(), name.clone())?;
        jobs::install_at(lua, &name, f)
            .map_err(|e| refused(NameRefusal::ServicePath, format!("register: {e}")))?;
        principal
            .services
            .add(&name, kind)
            .map_err(|e| refused(NameRefusal::ServiceTaken, e))?;
        self.insert(name, service);
        Ok(())
    }

    /// Calls service `name` on `args` for the task running on this thread: checks the
    /// capability a command requires, then runs it. Answers as [`run_service`].
    pub(crate) fn call(&self, name: &str, args: Message) -> Result<Option<Message>, String> {
        let service = self.service(name)?;
        if let Service::Command { requires, .. } = &*service {
            jobs::check_requirement(name, requires.as_ref())?;
        }
        run_service(name, &service, args)
    }

    /// Runs a recorded call of command `name` on `args`: its capability was checked where the
    /// call was recorded.
    fn run_recorded(&self, name: &str, args: Message) -> Result<Option<Message>, String> {
        let service = self.service(name)?;
        run_service(name, &service, args)
    }

    /// The service registered as `name`.
    fn service(&self, name: &str) -> Result<Rc<Service>, String> {
        let service = self.map.borrow().get(name).cloned();
        service.ok_or_else(|| format!("engine service '{name}' is not registered"))
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

    /// Applies recorded commands in order; answers the failures, each naming its service. The
    /// capability a command requires was checked when the call was recorded, under the
    /// authority it applies under, so it is not checked (nor a denial reported) again.
    pub(crate) fn apply(&self, commands: Vec<ServiceCall>) -> Vec<String> {
        let mut failures = Vec::new();
        for (name, args) in commands {
            self.applied.set(self.applied.get() + 1);
            if let Err(e) = self.run_recorded(&name, args) {
                failures.push(e);
            }
        }
        failures
    }
}

/// Runs `service`, registered as `name`, on `args`, containing a panic. Answers the query's
/// value (`None` for a command) or the error text, naming the service.
fn run_service(name: &str, service: &Service, args: Message) -> Result<Option<Message>, String> {
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match service {
        Service::Query(f) => f(args).map(Some),
        Service::Command { run, .. } => match run.try_borrow_mut() {
            Ok(mut f) => f(args).map(|()| None),
            Err(_) => Err("it was called again while it ran".to_owned()),
        },
    }));
    match ran {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(e)) => Err(jobs::service_failed(name, e)),
        Err(payload) => Err(format!(
            "engine service '{name}' panicked: {}",
            panic_message(&payload)
        )),
    }
}

/// The engine VM's function for service `name`: it calls the host's function directly.
pub(crate) fn engine_function(
    lua: &Lua,
    services: Rc<EngineServices>,
    name: Arc<str>,
) -> mlua::Result<mlua::Function> {
    lua.create_function(move |_, args: MessageArgs| {
        let args = jobs::read_args(&name, args)?;
        match services.call(&name, args) {
            Ok(answer) => Ok(answer.unwrap_or(Message::Nil)),
            Err(e) => Err(mlua::Error::runtime(e)),
        }
    })
}

/// A service's arguments (one list of them) as the type its function takes.
fn typed_args<A: FromMessage>(args: Message) -> std::result::Result<A, String> {
    let args = match args {
        Message::List(items) => items,
        Message::Map(entries) if entries.is_empty() => Vec::new(),
        other => vec![other],
    };
    A::from_args(args).map_err(|e| e.to_string())
}
