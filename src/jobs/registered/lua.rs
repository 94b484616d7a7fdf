//! The Luau side of registered jobs: `jobs.register`, `jobs.find`, `jobs.inspect`,
//! `jobs.list` and the `JobHandle` userdata.
//!
//! A handle holds only the job's id: once the job is cancelled every method answers false or
//! nil rather than raising, so code holding a stale handle never breaks.

use std::rc::Rc;

use mlua::{AnyUserData, Lua, Table, UserData, UserDataMethods, Value};

use super::{info, Registry};
use crate::vm::a_type;

/// A registered job, as Luau holds it.
pub(crate) struct JobHandle {
    id: u64,
}

impl UserData for JobHandle {
    fn add_methods<M: UserDataMethods<Self>>(methods: &mut M) {
        methods.add_method("cancel", |lua, this, ()| {
            Ok(registry(lua, "JobHandle:cancel")?.cancel(this.id))
        });
        methods.add_method("info", |lua, this, ()| {
            match registry(lua, "JobHandle:info")?.info(this.id) {
                Some(info) => info::to_lua(lua, &info).map(Value::Table),
                None => Ok(Value::Nil),
            }
        });
        methods.add_method("pause", |lua, this, ()| {
            Ok(registry(lua, "JobHandle:pause")?.set_paused(this.id, true))
        });
        methods.add_method("resume", |lua, this, ()| {
            Ok(registry(lua, "JobHandle:resume")?.set_paused(this.id, false))
        });
        methods.add_method("status", |lua, this, ()| {
            Ok(registry(lua, "JobHandle:status")?
                .info(this.id)
                .map(|i| i.status.as_str()))
        });
        methods.add_method("valid", |lua, this, ()| {
            Ok(registry(lua, "JobHandle:valid")?.get(this.id).is_some())
        });
        methods.add_meta_method("__tostring", |_, this, ()| {
            Ok(format!("JobHandle({})", this.id))
        });
    }
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

fn registry(lua: &Lua, function: &str) -> mlua::Result<Rc<Registry>> {
    lua.app_data_ref::<Rc<Registry>>()
        .map(|r| r.clone())
        .ok_or_else(|| {
            mlua::Error::runtime(format!(
                "{function} is not yet supported in a worker VM: registered jobs live on the \
                 engine thread, so call it there"
            ))
        })
}

fn register(lua: &Lua, descriptor: Value) -> mlua::Result<AnyUserData> {
    let registry = registry(lua, "jobs.register")?;
    let id = registry
        .register(lua, &descriptor)
        .map_err(mlua::Error::runtime)?;
    lua.create_userdata(JobHandle { id })
}

fn find(lua: &Lua, name: Value) -> mlua::Result<Option<AnyUserData>> {
    let registry = registry(lua, "jobs.find")?;
    let Value::String(name) = name else {
        return Err(mlua::Error::runtime(format!(
            "jobs.find: name must be a string, got {}",
            a_type(&name)
        )));
    };
    match registry.find(&name.to_string_lossy()) {
        Some(id) => lua.create_userdata(JobHandle { id }).map(Some),
        None => Ok(None),
    }
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
