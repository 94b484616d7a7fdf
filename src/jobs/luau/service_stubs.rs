//! Engine services seen from Luau: how a name becomes a global path of a VM, and the stubs a
//! worker VM calls in place of the host's functions.
//!
//! - a **query** stub copies its arguments, parks the calling task on a promise homed in its VM
//!   and posts a [`DomainEvent::Query`] carrying the commands the job recorded before it, so the
//!   engine thread applies them first; the answer settles the promise;
//! - a **command** stub checks the capability the command requires, if any (a denial raises in
//!   the calling task, as the same call on the engine thread does), then copies its arguments
//!   into the running job's [`CommandLog`](crate::vm::CommandLog) and returns.
//!
//! Arguments cross as one list, `Message::List` of the call's arguments; the engine side reads
//! it as the argument type of the host's function.

use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mlua::{Function, Lua, Table, Value};

use super::home::home;
use crate::jobs::leaves::service_names::{check_requirement, ServiceKind, ServiceNames};
use crate::jobs::protocol::messages::{DomainEvent, Query};
use crate::principal::capability::{current_arc, CapabilityId};
use crate::value::{Message, MessageArgs};
use crate::vm::{
    a_type, await_function, error_message, promise_handle, Embedded, Outcome, ServiceCall, VmCore,
};

/// Sets `f` at the dotted global path `name` of `lua`, making the tables on the way. Refused when
/// a segment on the way is not a table (or is a read-only built-in one) or the last is taken.
pub(crate) fn install_at(lua: &Lua, name: &str, f: Function) -> Result<(), String> {
    let taken = |what: &str| format!("engine service '{name}' can't be installed: {what}");
    let made = namespace_tables(lua).map_err(|e| taken(&e.to_string()))?;
    let ours = |t: &Table| made.contains_key(t).unwrap_or(false);
    // The namespace tables Skein made for services are read-only to scripts (a job could
    // otherwise swap `world.get` for every later job of its VM); each is opened only while a
    // service is added to it.
    let mut opened: Vec<Table> = Vec::new();
    let result = (|| {
        let mut table: Table = lua.globals();
        let mut segments = name.split('.').peekable();
        while let Some(segment) = segments.next() {
            let value: Value = table.get(segment).map_err(|e| taken(&e.to_string()))?;
            if segments.peek().is_none() {
                if !value.is_nil() {
                    return Err(taken(&format!("'{name}' is {} already", a_type(&value))));
                }
                return table.raw_set(segment, f).map_err(|e| taken(&e.to_string()));
            }
            table = match value {
                Value::Nil => {
                    let t = lua.create_table().map_err(|e| taken(&e.to_string()))?;
                    table
                        .raw_set(segment, t.clone())
                        .map_err(|e| taken(&e.to_string()))?;
                    made.raw_set(t.clone(), true)
                        .map_err(|e| taken(&e.to_string()))?;
                    opened.push(t.clone());
                    t
                }
                Value::Table(t) if !t.is_readonly() => t,
                Value::Table(t) if ours(&t) => {
                    t.set_readonly(false);
                    opened.push(t.clone());
                    t
                }
                Value::Table(_) => return Err(taken(&format!("'{segment}' is a read-only table"))),
                other => {
                    return Err(taken(&format!(
                        "'{segment}' is {}, not a table",
                        a_type(&other)
                    )))
                }
            };
        }
        Ok(())
    })();
    for t in opened {
        t.set_readonly(true);
    }
    result
}

/// Registry key of the set of namespace tables made for services (weak keys).
const NAMESPACE_TABLES_KEY: &str = "skein.service_namespaces";

/// The set of the namespace tables [`install_at`] made in this VM.
fn namespace_tables(lua: &Lua) -> mlua::Result<Table> {
    if let Value::Table(t) = lua.named_registry_value::<Value>(NAMESPACE_TABLES_KEY)? {
        return Ok(t);
    }
    let set = lua.create_table()?;
    let meta = lua.create_table()?;
    meta.raw_set("__mode", "k")?;
    set.set_metatable(Some(meta))?;
    lua.set_named_registry_value(NAMESPACE_TABLES_KEY, set.clone())?;
    Ok(set)
}

/// Copies a service call's arguments (read off the stack, so a whole number stays a number and
/// an integer an integer): one list of them, each named `args[i]` in a refusal.
pub(crate) fn read_args(service: &str, args: MessageArgs) -> mlua::Result<Message> {
    args.into_list()
        .map(Message::List)
        .map_err(|e| mlua::Error::runtime(format!("{service}: {e}")))
}

/// The Luau half of a query stub (it yields): `P.query` answers a promise, awaited here; the
/// promise resolves with `{ true, answer }` or `{ false, error }`.
static STUB: Embedded = Embedded::new("=skein services", include_str!("service_stub.luau"));

/// Registry key of this VM's query-stub maker.
const STUB_MAKER_KEY: &str = "skein.services.queryStub";

/// Installs, in a worker VM, the stubs of the names from position `from` on. Answers how many
/// names the VM has now. A name that can't be installed (a global of the same name is in the
/// way) is reported and skipped.
pub(crate) fn install_stubs(lua: &Lua, names: &ServiceNames, from: usize) -> usize {
    let new = names.since(from);
    if new.is_empty() {
        return from;
    }
    let core = VmCore::of(lua).ok();
    let installed_now = from + new.len();
    for (name, kind) in new {
        let made = match kind {
            ServiceKind::Query => query_stub(lua, &name),
            ServiceKind::Command { requires } => command_stub(lua, name.clone(), requires),
        };
        let installed = made
            .map_err(|e| error_message(&e))
            .and_then(|f| install_at(lua, &name, f));
        if let (Err(e), Some(core)) = (installed, &core) {
            core.report_failure("engine services", &e);
        }
    }
    installed_now
}

fn query_stub(lua: &Lua, name: &str) -> mlua::Result<Function> {
    let maker: Function = match lua.named_registry_value::<Value>(STUB_MAKER_KEY)? {
        Value::Function(f) => f,
        _ => {
            let p = lua.create_table()?;
            p.raw_set("query", lua.create_function(forward_query)?)?;
            let isyieldable: Function = lua
                .globals()
                .get::<Table>("coroutine")?
                .get("isyieldable")?;
            let maker: Function = STUB
                .load(lua)?
                .call((p, await_function(lua)?, isyieldable))?;
            lua.set_named_registry_value(STUB_MAKER_KEY, maker.clone())?;
            maker
        }
    };
    maker.call(name)
}

/// `P.query(name, yieldable, ...)`: posts the query with the job's commands so far and answers
/// the promise its task awaits.
fn forward_query(
    lua: &Lua,
    (name, yieldable, args): (mlua::LuaString, bool, MessageArgs),
) -> mlua::Result<Value> {
    // Skein's own stubs pass the service's name, which the host registered as text.
    let name = name.to_string_lossy();
    if !yieldable {
        return Err(mlua::Error::runtime(format!(
            "{name} can't wait here: a query from a worker waits for the engine thread; call it \
             from a task, not from a metamethod or a module's top level"
        )));
    }
    let args = read_args(&name, args)?;
    forward(lua, &name, args)
}

/// How long a pool worker whose item forwarded a query, while its domain's engine thread joins
/// a frame's pool work, leaves new items to its siblings (`WorkerLogic::hold_items_until`): at
/// most 1 ms, once per item, and only until the first message reaches the worker (the answer,
/// usually, tens of microseconds later). Without it the chunks of a `parallelFor` that each
/// start with a query pile into one worker's VM: each chunk parks at its query and the worker
/// takes the next, and since a parked task resumes only in its own VM, the chunks then run one
/// after another on that worker while its sibling idles and the frame waits
/// (`cargo bench --bench game_loop`). Outside a join nothing holds: a worker serving queries to
/// a host that answers late (between frames, in `pump`) starts every item it can, and items of
/// other domains never wait on this one's engine thread for long.
pub(crate) const QUERY_HOLD: Duration = Duration::from_millis(1);

thread_local! {
    /// When a task of this thread forwarded the query that holds the worker, until a message
    /// reaches the worker.
    static QUERY_POSTED: Cell<Option<Instant>> = const { Cell::new(None) };
    /// Whether the item this worker started last has held it already: a hold is armed once
    /// per item, so a task that forwards query after query never keeps its worker from the
    /// queue for longer than one hold.
    static HOLD_SPENT: Cell<bool> = const { Cell::new(false) };
}

/// Until when this thread's worker leaves new items to its siblings: [`QUERY_HOLD`] after the
/// query that armed the hold, if no message has reached it since.
pub(crate) fn query_hold_until() -> Option<Instant> {
    QUERY_POSTED.get().map(|at| at + QUERY_HOLD)
}

/// A message reached this thread's worker: what its forwarded query waited for may be here.
pub(crate) fn end_query_hold() {
    QUERY_POSTED.set(None);
}

/// The worker starts an item: its first query may hold the worker once.
pub(crate) fn item_started() {
    HOLD_SPENT.set(false);
}

/// Arms the hold for a query just forwarded, when its domain's engine thread is joining a
/// frame's work (the frame waits for every chunk, so a chunk that would sit behind this one
/// on this worker delays the frame) and the running item has not held its worker yet.
fn arm_query_hold(joining: bool) {
    if joining && !HOLD_SPENT.get() {
        HOLD_SPENT.set(true);
        QUERY_POSTED.set(Some(Instant::now()));
    }
}

/// Posts a query to service `name` of the engine thread with the running job's commands so
/// far, and answers the promise (resolving with `{ true, answer }` or `{ false, error }`) the
/// calling task awaits. For a caller that copied and checked `args` itself (a resource proxy of
/// a worker VM); the caller must run in a task that may wait.
pub(crate) fn forward(lua: &Lua, name: &str, args: Message) -> mlua::Result<Value> {
    let home = home(lua)?;
    let core = VmCore::of(lua)?;
    let owner = core.current_owner();
    let commands = owner
        .commands
        .as_ref()
        .map(|log| log.take())
        .unwrap_or_default();
    let cell = core.promises.borrow_mut().make("engine query");
    let reply = home.reply_to(cell.id());
    let posted = home
        .principal
        .mailbox
        .send(DomainEvent::Query(Box::new(Query {
            service: Arc::from(name),
            args,
            commands,
            reply,
            job: owner.identity.registered_job(),
            // The service runs as the task that called it, not as the domain.
            authority: current_arc(),
        })));
    if posted {
        arm_query_hold(home.principal.joining.load(Ordering::Relaxed));
    } else {
        core.promises
            .borrow_mut()
            .settle(cell.id(), Outcome::Cancelled);
        return Err(mlua::Error::runtime(format!(
            "{name}: the domain has stopped: {}",
            home.principal.end_reason()
        )));
    }
    promise_handle(lua, cell)
}

fn command_stub(
    lua: &Lua,
    name: Arc<str>,
    requires: Option<CapabilityId>,
) -> mlua::Result<Function> {
    lua.create_function(move |lua, args: MessageArgs| {
        let args = read_args(&name, args)?;
        // Checked as the call is made, under the calling task's authority: a refused call is
        // never recorded, and the task sees the refusal as the engine thread's caller would.
        check_requirement(&name, requires.as_ref()).map_err(mlua::Error::runtime)?;
        let core = VmCore::of(lua)?;
        let owner = core.current_owner();
        let call: ServiceCall = (name.clone(), args);
        let unheld = match &owner.commands {
            Some(log) => log.record(call),
            None => Some(call),
        };
        if let Some(call) = unheld {
            // Not held for a settlement (the entry returned, or the task is no job's): it
            // leaves now, after everything its job sent before.
            let home = home(lua)?;
            home.principal.mailbox.send(DomainEvent::Apply {
                commands: vec![call],
                then: None,
                authority: current_arc(),
            });
        }
        Ok(())
    })
}
