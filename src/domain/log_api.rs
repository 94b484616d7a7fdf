//! `@skein/log`, the Luau module every VM of a domain (engine and workers) logs through: it
//! builds a [`LogRecord`] attributed by the runtime and hands it to the domain's [`LogSink`](crate::log::LogSink), or
//! writes it on stderr when the domain has none. Luau's global `print` goes the same way, as
//! records marked `printed`, or to stdout when the domain has no sink.
//!
//! Luau's own `print` writes through C's `stdout`, which is block-buffered when stdout is a
//! pipe: a host's own output and the script's lines would come out of order, the script's at
//! exit. This `print` writes each line with one locked write and a flush instead.

use std::io::Write;

use mlua::{Function, Lua, MultiValue, Value};

use crate::jobs::home_principal;
use crate::ledger::{format_bytes, Charge};
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

/// Replaces the global `print` of `lua` (a base step of the domain's plan, run before the
/// host's functions and setup steps and before the sandbox closes the globals).
pub(crate) fn install_print(lua: &Lua) -> mlua::Result<()> {
    let globals = lua.globals();
    // `tostring` as the VM has it now: the conversion Luau's `print` makes (`__tostring`,
    // `__name`), and one a script can't swap later, as the sandbox makes globals read-only.
    let tostring: Function = globals.raw_get("tostring")?;
    let print = lua.create_function(move |lua, args: MultiValue| {
        let texts = args
            .into_iter()
            .map(|arg| tostring.call::<mlua::LuaString>(arg))
            .collect::<mlua::Result<Vec<_>>>()?;
        let len = texts.iter().map(|t| t.as_bytes().len()).sum::<usize>() + texts.len();
        // Held until the line is written.
        let _held = hold(lua, len, "print")?;
        let mut line = Vec::with_capacity(len);
        for (at, text) in texts.iter().enumerate() {
            if at > 0 {
                line.push(b'\t');
            }
            line.extend_from_slice(&text.as_bytes());
        }
        drop(texts);
        print_line(lua, line);
        Ok(())
    })?;
    globals.raw_set("print", print)
}

/// Charges a `print` line or a log record of `len` bytes to the domain's host memory, for as
/// long as the charge is held: twice `len`, for the line and the record's text (or what a sink
/// makes of it), both charged before either is made. A VM outside any domain holds nothing for
/// long.
fn hold(lua: &Lua, len: usize, what: &str) -> mlua::Result<Option<Charge>> {
    let Some(principal) = home_principal(lua) else {
        return Ok(None);
    };
    Charge::take(&principal.memory, len.saturating_mul(2))
        .map(Some)
        .map_err(|refused| {
            mlua::Error::runtime(format!(
                "{what}: a line of {} would not fit: {refused}",
                format_bytes(len)
            ))
        })
}

/// One `print` line: a record for the domain's sink, or a line on stdout without one.
fn print_line(lua: &Lua, mut line: Vec<u8>) {
    let principal = home_principal(lua);
    if let Some((principal, sink)) = principal.as_ref().and_then(|p| Some((p, p.logs.as_ref()?))) {
        let (target, source) = caller(lua);
        sink.record(&LogRecord {
            attribution: current_or(&principal.authority).attribution().clone(),
            level: LogLevel::Info,
            target,
            message: String::from_utf8_lossy(&line).into_owned(),
            fields: Message::Nil,
            source,
            printed: Some(line),
        });
        return;
    }
    line.push(b'\n');
    let mut out = std::io::stdout().lock();
    // As Luau's `print` does, a line that can't be written (stdout closed) is dropped rather
    // than failing the script.
    let _ = out.write_all(&line).and_then(|()| out.flush());
}

fn write(lua: &Lua, level: LogLevel, message: Value, fields: Value) -> mlua::Result<()> {
    let Value::String(message) = message else {
        return Err(mlua::Error::runtime(format!(
            "log.{level}: message must be a string, got {}",
            a_type(&message)
        )));
    };
    // Weighed as it is read, within the bound of one copy.
    let (fields, weight) = match &fields {
        Value::Nil => (Message::Nil, 0),
        Value::Table(_) => Message::read_weighed(&fields, "fields")
            .map_err(|e| mlua::Error::runtime(format!("log.{level}: {e}")))?,
        other => {
            return Err(mlua::Error::runtime(format!(
                "log.{level}: fields must be a table or nil, got {}",
                a_type(other)
            )))
        }
    };
    // The record's text and fields, held until the sink has the record.
    let _held = hold(
        lua,
        message.as_bytes().len().saturating_add(weight),
        &format!("log.{level}"),
    )?;
    let Ok(message) = message.to_str().map(|m| m.to_owned()) else {
        return Err(mlua::Error::runtime(format!(
            "log.{level}: message must be UTF-8 text"
        )));
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
        printed: None,
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
