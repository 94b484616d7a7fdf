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

use crate::domain::{Report, ScriptDomain};
use crate::error::{Error, NameRefusal, Result};
use crate::jobs;
use crate::value::{FromMessage, IntoMessage, Message, MessageArgs};
use crate::vm::{panic_message, ServiceCall};

type QueryFn = Box<dyn Fn(Message) -> Result<Message, String>>;
type CommandFn = RefCell<Box<dyn FnMut(Message) -> Result<(), String>>>;

/// One service the host registered.
pub(crate) enum Service {
    Query(QueryFn),
    Command(CommandFn),
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
    pub const FOLLOW_UP_DRAINS: u32 = super::FOLLOW_UP_DRAINS;

    /// The longest a frame waits, in all, for the follow-ups of the forwarded queries it
    /// answered: 2 ms. A frame that answered none, or whose engine VM has no task waiting on
    /// pool work, never waits.
    pub const FOLLOW_UP_WAIT: Duration = super::FOLLOW_UP_WAIT;

    /// The longest a wave of registered jobs waits for the pool items it started before the
    /// phase's next wave starts: 100 ms, or the domain's run deadline when that is shorter (see
    /// [`ScriptDomain::frame`](crate::ScriptDomain::frame)). An item still running then is
    /// reported and applies in a later frame.
    pub const WAVE_WAIT: Duration = super::WAVE_WAIT;
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

impl ScriptDomain {
    /// Registers a query: a function of the host that answers a value, reached from Luau at
    /// the dotted global path `name` (`world.get`). In the engine VM the path calls `f`
    /// directly; in a worker VM it forwards the call to this thread and the calling task waits
    /// for the answer, after every command its job recorded before it has applied.
    ///
    /// `f` takes the call's arguments as any [`FromMessage`] type: a tuple reads them by
    /// position (`|(id, pos): (i64, [f32; 3])|`), `()` ignores them, a [`Message`] takes them
    /// all as one list. Its answer is any [`IntoMessage`] type. An argument that does not
    /// convert is raised to the caller naming it (`args[2]: expected a vector, got a string`);
    /// an `Err` is raised naming the service, and so is a panic, which is contained.
    ///
    /// ```
    /// use skein::{DomainSpec, Message, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let domain = ScriptDomain::new(&pool, DomainSpec::new("main"))?;
    /// domain.register_query("world.scale", |(by, pos): (f64, [f32; 3])| {
    ///     Ok(pos.map(|c| c * by as f32))
    /// })?;
    /// let moved = domain.eval("return world.scale(2, vector.create(1, 2, 3))")?;
    /// assert_eq!(moved, Message::Vector([2.0, 4.0, 6.0]));
    /// let err = domain.eval("return world.scale('x', vector.zero)").unwrap_err().to_string();
    /// assert!(err.contains(
    ///     "engine service 'world.scale' failed: args[1]: expected a number (or an integer within ±2^53), got a string"
    /// ));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Name`] naming the [`NameRefusal`]: when the name is not 1 to 256 bytes of
    /// dotted Luau identifiers, is registered already, or its path is taken in the engine VM (a
    /// global that is not a table, a read-only built-in table, or a value at the path itself).
    pub fn register_query<A, R, F>(&self, name: &str, f: F) -> Result<()>
    where
        A: FromMessage,
        R: IntoMessage,
        F: Fn(A) -> std::result::Result<R, String> + 'static,
    {
        let query = move |args: Message| {
            let answer = f(typed_args(args)?)?;
            answer
                .into_message()
                .map_err(|e| format!("its answer: {e}"))
        };
        self.register(
            name,
            jobs::ServiceKind::Query,
            Service::Query(Box::new(query)),
        )
    }

    /// Registers a command: a function of the host that changes host state and answers
    /// nothing, reached from Luau at the dotted global path `name` (`world.set`). In the engine
    /// VM the path calls `f` directly; in a worker VM the call is recorded and returns at once,
    /// and this thread applies the job's commands in the order it recorded them, before the
    /// job's promise settles.
    ///
    /// `f` takes the call's arguments as [`register_query`](Self::register_query)'s does.
    ///
    /// ```
    /// use std::{cell::RefCell, rc::Rc};
    /// use skein::{DomainSpec, Message, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let domain = ScriptDomain::new(&pool, DomainSpec::new("main"))?;
    /// let log = Rc::new(RefCell::new(Vec::new()));
    /// let sink = log.clone();
    /// domain.register_command("log.write", move |(text, weight): (String, f64)| {
    ///     sink.borrow_mut().push((text, weight));
    ///     Ok(())
    /// })?;
    /// domain.eval("log.write('a', 1.5)")?;
    /// assert_eq!(*log.borrow(), vec![("a".to_owned(), 1.5)]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// As [`register_query`](Self::register_query).
    pub fn register_command<A, F>(&self, name: &str, mut f: F) -> Result<()>
    where
        A: FromMessage,
        F: FnMut(A) -> std::result::Result<(), String> + 'static,
    {
        let command = move |args: Message| f(typed_args(args)?);
        let service = Service::Command(RefCell::new(Box::new(command)));
        self.register(name, jobs::ServiceKind::Command, service)
    }

    /// Serves a query named `name` to forwarded calls only: nothing is installed in any VM,
    /// so a layer above (resources) reaches it through its own worker-side stub, and a name
    /// that is no Luau path (`@skein/resources.call`) can't meet a host's service. A name
    /// served already is replaced.
    pub(crate) fn serve_query(
        &self,
        name: &str,
        f: impl Fn(Message) -> std::result::Result<Message, String> + 'static,
    ) {
        self.frames
            .services
            .insert(Arc::from(name), Service::Query(Box::new(f)));
    }

    pub(crate) fn register(
        &self,
        name: &str,
        kind: jobs::ServiceKind,
        service: Service,
    ) -> Result<()> {
        let refused = |refusal, message| Error::Name { refusal, message };
        jobs::check_service_name(name).map_err(|e| refused(NameRefusal::ServiceName, e))?;
        if self.frames.services.contains(name) {
            return Err(refused(
                NameRefusal::ServiceTaken,
                format!("register: engine service '{name}' is registered already"),
            ));
        }
        let name: Arc<str> = Arc::from(name);
        let f = engine_function(
            &self.current.vm.lua,
            self.frames.services.clone(),
            name.clone(),
        )?;
        jobs::install_at(&self.current.vm.lua, &name, f)
            .map_err(|e| refused(NameRefusal::ServicePath, format!("register: {e}")))?;
        self.current
            .principal
            .services
            .add(&name, kind)
            .map_err(|e| refused(NameRefusal::ServiceTaken, e))?;
        self.frames.services.insert(name, service);
        Ok(())
    }
}
