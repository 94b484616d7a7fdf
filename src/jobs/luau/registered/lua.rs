//! The Luau side of registered jobs: `jobs.register`, `jobs.find`, `jobs.inspect`,
//! `jobs.list` and the `JobHandle` userdata.
//!
//! A handle holds the job's id and one reference to the job (see
//! `jobs/leaves/registered/directory.rs`): the handle `jobs.register` answers holds the
//! registration's, each handle `jobs.find` answers one of its own. `cancel` drops the handle's
//! reference, once; the last one dropped unregisters the job. A collected `jobs.find` handle gives
//! its reference back; a collected registration handle keeps its reference with the job, so a job
//! whose script dropped its handle runs on. The other methods read and steer the job, not the
//! reference: once the job is unregistered every method answers false or nil rather than raising,
//! so code holding a stale handle never breaks.
//!
//! In a worker VM, `jobs.register` keeps the job's functions in that VM (see `remote`) and its
//! handle answers from the VM's own record of its jobs: `valid` and `cancel` at once, `info` and
//! `status` as the engine last saw the job (its last frame or drain), `pause` and `resume` from
//! the engine's next drain.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::{Arc, Weak};

use mlua::{AnyUserData, Lua, Table, UserData, UserDataMethods, Value};

use super::remote;
use super::RegisteredJobs;
use crate::jobs::leaves::registered::directory::JobDirectory;
use crate::jobs::leaves::registered::info;
use crate::jobs::leaves::registered::remote_job::Control;
use crate::jobs::luau::home::home;
use crate::vm::a_type;

/// A registered job, as Luau holds it.
pub(crate) struct JobHandle {
    id: u64,
    /// The reference to the job this handle holds, until its cancel drops it.
    reference: Cell<Reference>,
    /// Where a collected `jobs.find` handle gives its reference back. Weak: a handle outliving
    /// its generation holds nothing of it.
    directory: Weak<JobDirectory>,
}

/// Which reference a handle holds on its job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reference {
    /// The registration's: dropped only by a cancel, never by a collection.
    Registration,
    /// One `jobs.find` added: dropped by a cancel, or given back when the handle is collected.
    Found,
    /// Dropped by the handle's cancel.
    Dropped,
}

impl Drop for JobHandle {
    fn drop(&mut self) {
        // Runs during a collection: it may not reach the registry (which may be borrowed), so
        // the directory queues a job this frees for the engine's next access.
        if self.reference.get() == Reference::Found {
            if let Some(directory) = self.directory.upgrade() {
                directory.give_back(self.id);
            }
        }
    }
}

impl UserData for JobHandle {
    // Each method takes `self` as an argument of its own, so `h.cancel(1)` is refused naming
    // the method.
    fn add_methods<M: UserDataMethods<Self>>(methods: &mut M) {
        methods.add_function("cancel", |lua, this: Value| cancel(lua, &this, "cancel"));
        // `destroy` is `cancel` under its other name.
        methods.add_function("destroy", |lua, this: Value| cancel(lua, &this, "destroy"));
        methods.add_function("info", |lua, this: Value| {
            let id = job_id(&this, "info")?;
            let info = match engine(lua) {
                Some(registry) => registry.info(id),
                None => remote::info(lua, id),
            };
            match info {
                Some(info) => info::to_lua(lua, &info).map(Value::Table),
                None => Ok(Value::Nil),
            }
        });
        methods.add_function("pause", |lua, this: Value| {
            let id = job_id(&this, "pause")?;
            match engine(lua) {
                Some(registry) => Ok(registry.set_paused(id, true)),
                None => worker_control(lua, id, Control::Pause),
            }
        });
        methods.add_function("resume", |lua, this: Value| {
            let id = job_id(&this, "resume")?;
            match engine(lua) {
                Some(registry) => Ok(registry.set_paused(id, false)),
                None => worker_control(lua, id, Control::Resume),
            }
        });
        methods.add_function("status", |lua, this: Value| {
            let id = job_id(&this, "status")?;
            let info = match engine(lua) {
                Some(registry) => registry.info(id),
                None => remote::info(lua, id),
            };
            Ok(info.map(|i| i.status.as_str()))
        });
        methods.add_function("valid", |lua, this: Value| {
            let id = job_id(&this, "valid")?;
            match engine(lua) {
                Some(registry) => Ok(registry.get(id).is_some()),
                None => Ok(remote::valid(lua, id)),
            }
        });
        methods.add_meta_method("__tostring", |_, this, ()| {
            Ok(format!("JobHandle({})", this.id))
        });
    }
}

/// `JobHandle:cancel()` and `destroy()`: drops the handle's reference, unless it dropped it
/// already (then it drops nothing and answers false). Answers whether the job was registered.
fn cancel(lua: &Lua, this: &Value, method: &str) -> mlua::Result<bool> {
    let held = match this {
        Value::UserData(ud) => ud
            .borrow::<JobHandle>()
            .ok()
            .map(|h| (h.id, h.reference.replace(Reference::Dropped))),
        _ => None,
    };
    let Some((id, reference)) = held else {
        return Err(crate::vm::not_self(
            &format!("JobHandle:{method}"),
            "job",
            this,
        ));
    };
    if reference == Reference::Dropped {
        return Ok(false);
    }
    match engine(lua) {
        Some(registry) => Ok(registry.cancel(id)),
        None => Ok(remote::cancel(lua, &*home(lua)?, id)),
    }
}

/// The job id of a method's `self`, refused naming the method when it is no job handle.
fn job_id(this: &Value, method: &str) -> mlua::Result<u64> {
    let id = match this {
        Value::UserData(ud) => ud.borrow::<JobHandle>().ok().map(|h| h.id),
        _ => None,
    };
    id.ok_or_else(|| crate::vm::not_self(&format!("JobHandle:{method}"), "job", this))
}

/// The engine VM's registry, with the jobs collected handles freed dropped from it; `None` in a
/// worker VM, where a handle answers for the jobs that VM registered.
fn engine(lua: &Lua) -> Option<Rc<RegisteredJobs>> {
    let registry = lua
        .app_data_ref::<Rc<RegisteredJobs>>()
        .map(|r| r.clone())?;
    registry.reap();
    Some(registry)
}

fn worker_control(lua: &Lua, id: u64, control: Control) -> mlua::Result<bool> {
    let home = home(lua)?;
    Ok(remote::control(lua, &home, id, control))
}

/// Adds `register`, `find`, `inspect` and `list` to the `jobs` table of any VM. They work on an
/// engine VM (the one whose app data holds the domain's registry); in a worker VM they raise.
pub(crate) fn install(lua: &Lua, jobs: &Table) -> mlua::Result<()> {
    jobs.raw_set("register", lua.create_function(register)?)?;
    jobs.raw_set("find", lua.create_function(find)?)?;
    jobs.raw_set("inspect", lua.create_function(inspect)?)?;
    jobs.raw_set("list", lua.create_function(list)?)?;
    Ok(())
}

fn registry(lua: &Lua, function: &str) -> mlua::Result<Rc<RegisteredJobs>> {
    engine(lua).ok_or_else(|| {
        mlua::Error::runtime(format!(
            "{function} is not yet supported in a worker VM: the domain's job list lives on the \
             engine thread, so call it there (a worker VM reaches the jobs it registered through \
             their handles)"
        ))
    })
}

fn register(lua: &Lua, descriptor: Value) -> mlua::Result<AnyUserData> {
    let (id, directory) = match engine(lua) {
        Some(registry) => (
            registry.register(lua, &descriptor),
            Arc::downgrade(&registry.principal.jobs),
        ),
        None => {
            let home = home(lua)?;
            (
                remote::register(lua, &home, &descriptor),
                Arc::downgrade(&home.principal.jobs),
            )
        }
    };
    let id = id.map_err(mlua::Error::runtime)?;
    // Should making the userdata fail, the registration's reference stays with the job, as a
    // collected registration handle's does.
    lua.create_userdata(JobHandle {
        id,
        reference: Cell::new(Reference::Registration),
        directory,
    })
}

fn find(lua: &Lua, name: Value) -> mlua::Result<Option<AnyUserData>> {
    let registry = registry(lua, "jobs.find")?;
    let Value::String(name) = name else {
        return Err(mlua::Error::runtime(format!(
            "jobs.find: name must be a string, got {}",
            a_type(&name)
        )));
    };
    let Some(id) = registry.find(&name.to_string_lossy()) else {
        return Ok(None);
    };
    if !registry.hold(id) {
        return Ok(None);
    }
    // Should making the userdata fail, the handle is dropped here and gives the reference back.
    let handle = JobHandle {
        id,
        reference: Cell::new(Reference::Found),
        directory: Arc::downgrade(&registry.principal.jobs),
    };
    lua.create_userdata(handle).map(Some)
}

fn inspect(lua: &Lua, target: Value) -> mlua::Result<Value> {
    let registry = registry(lua, "jobs.inspect")?;
    let id = match &target {
        Value::String(name) => registry.find(&name.to_string_lossy()),
        Value::UserData(ud) if ud.is::<JobHandle>() => Some(ud.borrow::<JobHandle>()?.id),
        other => {
            return Err(mlua::Error::runtime(format!(
                "jobs.inspect: target must be a JobHandle or a job name, got {}",
                a_type(other)
            )))
        }
    };
    match id.and_then(|id| registry.info(id)) {
        Some(info) => info::to_lua(lua, &info).map(Value::Table),
        None => Ok(Value::Nil),
    }
}

fn list(lua: &Lua, phase: Value) -> mlua::Result<Table> {
    let registry = registry(lua, "jobs.list")?;
    let phase = match &phase {
        Value::Nil => None,
        Value::String(s) => Some(s.to_string_lossy().to_string()),
        other => {
            return Err(mlua::Error::runtime(format!(
                "jobs.list: phase must be a string or nil, got {}",
                a_type(other)
            )))
        }
    };
    let rows = registry.list(phase.as_deref());
    let out = lua.create_table_with_capacity(rows.len(), 0)?;
    for row in &rows {
        out.raw_push(info::to_lua(lua, row)?)?;
    }
    Ok(out)
}
