//! `@skein/log`, the Luau module every VM of a domain (engine and workers) logs through: it
//! builds a [`LogRecord`] attributed by the runtime and hands it to the domain's [`LogSink`](crate::LogSink), or
//! writes it on stderr when the domain has none.

use mlua::{Lua, Value};

use crate::jobs::home_principal;
use crate::principal::capability::current_or;
use crate::principal::{LogLevel, LogRecord};
use crate::value::Message;
use crate::vm::a_type;

/// Registry key of the module table `require("@skein/log")` answers.
const LOG_KEY: &str = "skein.log";

/// The module table, built on first use in each VM.
pub(crate) fn module(lua: &Lua) -> mlua::Result<Value> {
    let cached: Value = lua.named_registry_value(LOG_KEY)?;
    if !cached.is_nil() {
        return Ok(cached);
    }
    let log = lua.create_table()?;
    for level in LogLevel::ALL {
        let f = lua.create_function(move |lua, (message, fields): (Value, Value)| {
            write(lua, level, message, fields)
        })?;
        log.raw_set(level.name(), f)?;
    }
    log.set_readonly(true);
    lua.set_named_registry_value(LOG_KEY, &log)?;
    Ok(Value::Table(log))
}

fn write(lua: &Lua, level: LogLevel, message: Value, fields: Value) -> mlua::Result<()> {
    let message = match message {
        Value::String(s) => s.to_str()?.to_owned(),
        other => {
            return Err(mlua::Error::runtime(format!(
                "log.{level}: message must be a string, got {}",
                a_type(&other)
            )))
        }
    };
    let fields = match &fields {
        Value::Nil | Value::Table(_) => Message::from_lua(&fields, "fields")
            .map_err(|e| mlua::Error::runtime(format!("log.{level}: {e}")))?,
        other => {
            return Err(mlua::Error::runtime(format!(
                "log.{level}: fields must be a table or nil, got {}",
                a_type(other)
            )))
        }
    };
    let (target, source) = caller(lua);
    let Some(principal) = home_principal(lua) else {
        // A VM outside any domain has no one to attribute the record to.
        eprintln!("{level} {target}: {message}");
        return Ok(());
    };
    let record = LogRecord {
        // The running task's authority names the context or worker that wrote the record.
        attribution: current_or(&principal.authority).attribution().clone(),
        level,
        target,
        message,
        fields,
        source,
    };
    match &principal.logs {
        Some(sink) => sink.record(&record),
        None => eprintln!("{record}"),
    }
    Ok(())
}

/// The calling chunk's name and `chunk:line` of the call.
fn caller(lua: &Lua) -> (String, Option<String>) {
    lua.inspect_stack(1, |debug| {
        let source = debug.source();
        let chunk = source
            .short_src
            .as_deref()
            .unwrap_or("?")
            .trim_start_matches('@')
            .to_owned();
        let at = debug.current_line().map(|line| format!("{chunk}:{line}"));
        (chunk, at)
    })
    .unwrap_or_else(|| ("?".to_owned(), None))
}
