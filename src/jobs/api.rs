//! The Luau `jobs` library: `jobs.dispatch` and `jobs.context`.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use mlua::{Lua, Table, Value};

use super::item::{Item, JobShared, ReplyTo};
use super::options::DispatchOptions;
use super::pool::PoolShared;
use super::principal::PrincipalCell;
use crate::value::Message;
use crate::vm::{promise_handle, with_caller_source, VmCore};

/// Where the VM that calls `jobs.*` lives.
pub(crate) enum HomeKind {
    /// A domain's engine thread.
    Engine,
    /// A pool worker; items it dispatches go to its own deque through `outbox`.
    Worker {
        index: usize,
        outbox: Rc<RefCell<Vec<Item>>>,
    },
}

/// What the `jobs` bindings of one VM need: who they run as and how they reach the pool.
pub(crate) struct JobsHome {
    pub(crate) principal: Arc<PrincipalCell>,
    pub(crate) pool: Arc<PoolShared>,
    pub(crate) kind: HomeKind,
}

/// Installs the `jobs` global (also `require("@skein/jobs")`).
pub(crate) fn install(lua: &Lua, home: JobsHome) -> mlua::Result<()> {
    lua.set_app_data(Rc::new(home));
    let jobs = lua.create_table()?;
    jobs.raw_set("dispatch", lua.create_function(dispatch)?)?;
    jobs.raw_set("context", lua.create_function(context)?)?;
    lua.set_named_registry_value(JOBS_KEY, jobs.clone())?;
    lua.globals().raw_set("jobs", jobs)?;
    Ok(())
}

/// Registry key of the `jobs` table, which `require("@skein/jobs")` answers.
pub(crate) const JOBS_KEY: &str = "skein.jobs";

fn home(lua: &Lua) -> mlua::Result<Rc<JobsHome>> {
    lua.app_data_ref::<Rc<JobsHome>>()
        .map(|h| h.clone())
        .ok_or_else(|| mlua::Error::runtime("jobs: this VM is not attached to a pool"))
}

fn context(lua: &Lua, (): ()) -> mlua::Result<Value> {
    let home = home(lua)?;
    match &home.kind {
        HomeKind::Engine => Ok(Value::Nil),
        HomeKind::Worker { index, .. } => {
            let t: Table = lua.create_table()?;
            t.raw_set("worker", *index as i64)?;
            t.raw_set("key", Value::Nil)?;
            t.raw_set("fresh", false)?;
            Ok(Value::Table(t))
        }
    }
}

fn refuse(message: String) -> mlua::Error {
    mlua::Error::runtime(message)
}

fn dispatch(
    lua: &Lua,
    (module, entry, args, opts): (Value, Value, Value, Value),
) -> mlua::Result<Value> {
    let home = home(lua)?;
    let core = VmCore::of(lua)?;
    let module = match module {
        Value::String(s) => s.to_string_lossy(),
        other => {
            return Err(refuse(format!(
                "jobs.dispatch: module must be a require path string, got {}",
                other.type_name()
            )))
        }
    };
    let entry = match entry {
        Value::String(s) => s.to_string_lossy(),
        other => {
            return Err(refuse(format!(
                "jobs.dispatch: entry must be the name of a function, got {}",
                other.type_name()
            )))
        }
    };
    let opts = DispatchOptions::read(&opts, home.principal.max_deadline).map_err(refuse)?;
    let path = with_caller_source(lua, |source| core.modules.resolve(source, &module))
        .map_err(|e| refuse(format!("jobs.dispatch: {e}")))?;
    let args =
        Message::from_lua(&args, "args").map_err(|e| refuse(format!("jobs.dispatch: {e}")))?;

    let entry: Arc<str> = Arc::from(entry);
    let job = JobShared::new(opts.name, module, entry.clone());
    let cell = core.promises.borrow_mut().make("jobs.dispatch");
    {
        let pool = home.pool.clone();
        let job = job.clone();
        let principal = home.principal.id;
        cell.set_canceller(Box::new(move || pool.cancel_job(&job, principal)));
    }
    let reply = match &home.kind {
        HomeKind::Engine => ReplyTo::Engine(cell.id()),
        HomeKind::Worker { index, .. } => ReplyTo::Worker {
            worker: *index,
            promise: cell.id(),
        },
    };
    let item = Item {
        principal: home.principal.clone(),
        job,
        module: path,
        entry,
        args,
        deadline: opts.deadline,
        reply,
    };
    match &home.kind {
        HomeKind::Engine => home.pool.inject(item),
        HomeKind::Worker { outbox, .. } => outbox.borrow_mut().push(item),
    }
    Ok(Value::UserData(promise_handle(lua, cell)?))
}
