//! One Luau VM and everything around it: the plan that builds it, the sandbox and prelude, the
//! module loader, the per-run budget, the task scheduler and promises.
//!
//! This layer knows nothing of pools or domains: the `jobs` layer installs its bindings through
//! [`Vm::build`]'s `install` step and reaches its own state through the VM's app data.

pub(crate) mod budget;
mod builtins;
mod caught_error;
mod core;
pub(crate) mod coroutine;
mod embedded;
mod failure;
mod liveness;
mod load_stage;
pub(crate) mod loader;
mod luau_promise;
mod modules;
mod native;
mod native_hint;
mod os_time;
mod out_of_memory;
mod owner;
mod plan;
pub(crate) mod promise_handle;
mod raised;
mod scheduler;
mod signal_waits;
pub(crate) mod source;
mod stall_report;
mod task_library;

pub(crate) use self::core::{
    close_globals, with_open_globals, FirstRun, Reporter, Spare, Vm, VmCore,
};
pub(crate) use budget::{
    current_signal, format_seconds, run_left, CancelToken, DeadlineMessage, Signal,
};
pub(crate) use builtins::{registered_or_refusing, Builtin};
pub(crate) use embedded::Embedded;
pub use failure::{FailureKind, JobFailure};
pub(crate) use liveness::STALL_HORIZON;
pub(crate) use liveness::{Liveness, Still, STALL_QUIET};
pub use load_stage::LoadStage;
pub(crate) use luau_promise::UNAWAITED_KEPT;
pub(crate) use luau_promise::{Cancel, Outcome, PromiseCell, PromiseId};
pub(crate) use modules::{
    caller_chunk, check_sources, source_epoch, source_written, with_caller_source, Resolved,
};
pub use native::NativeMode;
pub(crate) use native::{mode_of, report_to, used_by as native_used_by, NativeTally};
pub(crate) use owner::{
    panic_message, CommandLog, Completion, Owner, OwnerIdentity, ServiceCall, TaskFailure,
};
pub use plan::Plan;
pub(crate) use promise_handle::{
    await_function, free_collected, handle as promise_handle, promise_of,
};
pub(crate) use scheduler::{
    return_coroutine, root_coroutine, start_root, Resume, RootEnd, SchedulerVm, TaskId,
};
pub(crate) use signal_waits::SignalKind;
pub(crate) use stall_report::{watch as watch_liveness, VmWaits, WaitOn};
pub(crate) use task_library::{park_signal, wait_function, FrameClock};

/// A value's type with its article, as error messages name it: `nil`, `a number`, `an integer`.
pub(crate) fn a_type(value: &mlua::Value) -> String {
    match value {
        mlua::Value::Nil => "nil".to_owned(),
        // mlua reads every whole Luau number as `Value::Integer`; Luau calls it a number.
        mlua::Value::Integer(_) => "a number".to_owned(),
        v => {
            let name = v.type_name();
            format!("{} {name}", article(name))
        }
    }
}

pub(crate) use crate::value::article;

/// The most bytes of a script's string a refusal quotes: past it only the start is shown.
pub(crate) const QUOTED_BYTES: usize = 256;

/// `'text'`: a string a script gave, as a refusal quotes it. Past [`QUOTED_BYTES`] only its
/// start is shown, with its length, so refusing a 64 MiB argument makes a short text, not
/// another copy of the argument the VM or the host may have no room for.
pub(crate) fn quoted(text: &[u8]) -> String {
    if text.len() <= QUOTED_BYTES {
        return format!("'{}'", String::from_utf8_lossy(text));
    }
    format!(
        "'{}...' ({} bytes)",
        String::from_utf8_lossy(&text[..QUOTED_BYTES]),
        text.len()
    )
}

/// The refusal of a method called on something that is not its object (`q.push(1)` for
/// `q:push(1)`): `SharedQueue:push: self must be a queue, got a number; call it as
/// queue:push(...)`.
pub(crate) fn not_self(method: &str, object: &str, got: &mlua::Value) -> mlua::Error {
    let name = method.rsplit(':').next().unwrap_or(method);
    mlua::Error::runtime(format!(
        "{method}: self must be {} {object}, got {}; call it as {object}:{name}(...)",
        article(object),
        a_type(got)
    ))
}

/// A number as Luau prints it (`nan`, `inf`, `-0`, `1e+300`), for refusals that quote one.
pub(crate) fn luau_number(n: f64) -> String {
    if n.is_nan() {
        "nan".to_owned()
    } else if n.is_infinite() {
        if n > 0.0 { "inf" } else { "-inf" }.to_owned()
    } else if n == 0.0 && n.is_sign_negative() {
        "-0".to_owned()
    } else if n == n.trunc() && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

/// Calls `read` with each (key, value) of an options table `opts`, which must be nil or a table;
/// `call` names the function in the refusal. Every options table of the Luau surface is read
/// through it, so an unknown option is refused by its name everywhere: `read` answers whether
/// `key` is one of `expected`, and a key that is not a string is refused before `read` sees it.
pub(crate) fn for_each_option(
    opts: &mlua::Value,
    call: &str,
    expected: &str,
    mut read: impl FnMut(&str, mlua::Value) -> Result<bool, String>,
) -> Result<(), String> {
    let table: &mlua::Table = match opts {
        mlua::Value::Nil => return Ok(()),
        mlua::Value::Table(t) => t,
        other => {
            return Err(format!(
                "{call}: opts must be a table, got {}",
                a_type(other)
            ))
        }
    };
    for pair in table.pairs::<mlua::Value, mlua::Value>() {
        let (key, value) = pair.map_err(|e| e.to_string())?;
        let known = match &key {
            mlua::Value::String(s) => read(&s.to_string_lossy(), value)?,
            _ => false,
        };
        if !known {
            return Err(unknown_option(call, "opts", &key, expected));
        }
    }
    Ok(())
}

/// The refusal of a key of the options table `param` of `call` that names none of its
/// options (`expected`): `jobs.dispatch: unknown option 'dealine' in opts: expected deadline,
/// name, key or supersede`.
pub(crate) fn unknown_option(call: &str, param: &str, key: &mlua::Value, expected: &str) -> String {
    match key {
        mlua::Value::String(s) => format!(
            "{call}: unknown option {} in {param}: expected {expected}",
            quoted(&s.as_bytes())
        ),
        other => format!(
            "{call}: {param} has {} key, but options are named by strings: expected {expected}",
            a_type(other)
        ),
    }
}

/// The message of an mlua error without mlua's wrapping: what a Luau user would read.
pub(crate) fn error_message(err: &mlua::Error) -> String {
    match err {
        mlua::Error::RuntimeError(m) => m.clone(),
        mlua::Error::MemoryError(_) => "out of memory: the VM reached its memory limit".to_owned(),
        mlua::Error::SyntaxError { message, .. } => message.clone(),
        mlua::Error::CallbackError { cause, .. } => error_message(cause),
        mlua::Error::WithContext { cause, .. } => error_message(cause),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quoted_string_past_its_bound_shows_its_start_and_its_length() {
        assert_eq!(quoted(b"main"), "'main'");
        let at_bound = "n".repeat(QUOTED_BYTES);
        assert_eq!(quoted(at_bound.as_bytes()), format!("'{at_bound}'"));
        let huge = "n".repeat(64 << 20);
        assert_eq!(
            quoted(huge.as_bytes()),
            format!("'{at_bound}...' ({} bytes)", 64 << 20)
        );
    }

    #[test]
    fn numbers_read_as_luau_prints_them() {
        let shown: Vec<String> = [
            f64::NAN,
            f64::INFINITY,
            -f64::INFINITY,
            -0.0,
            0.0,
            61.0,
            0.5,
        ]
        .into_iter()
        .map(luau_number)
        .collect();
        assert_eq!(shown, ["nan", "inf", "-inf", "-0", "0", "61", "0.5"]);
    }

    #[test]
    fn every_type_name_takes_the_article_it_is_said_with() {
        let named: Vec<String> = [
            "nil",
            "boolean",
            "number",
            "integer",
            "vector",
            "string",
            "table",
            "function",
            "thread",
            "userdata",
            "light userdata",
            "buffer",
            "error",
            "unknown",
        ]
        .into_iter()
        .map(|name| format!("{} {name}", article(name)))
        .collect();
        assert_eq!(
            named,
            [
                "a nil",
                "a boolean",
                "a number",
                "an integer",
                "a vector",
                "a string",
                "a table",
                "a function",
                "a thread",
                "a userdata",
                "a light userdata",
                "a buffer",
                "an error",
                "an unknown"
            ]
        );
    }
}
