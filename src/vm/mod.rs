//! One Luau VM and everything around it: the plan that builds it, the sandbox and prelude, the
//! module loader, the per-run budget, the task scheduler and promises.
//!
//! This layer knows nothing of pools or domains: the `jobs` layer installs its bindings through
//! [`Vm::build`]'s `install` step and reaches its own state through the VM's app data.

pub(crate) mod budget;
mod builtins;
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

pub(crate) use self::core::{close_globals, with_open_globals, FirstRun, Reporter, Vm, VmCore};
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
pub(crate) use promise_handle::{await_function, free_collected, promise_of};
pub(crate) use scheduler::{
    return_coroutine, root_coroutine, start_root, Resume, RootEnd, SchedulerHost, TaskId,
};
pub(crate) use signal_waits::SignalKind;
pub(crate) use stall_report::{watch as watch_liveness, VmWaits, WaitOn};
pub(crate) use task_library::{park_signal, wait_function, FrameClock};

/// A promise's Luau handle (a table: see `promise_handle.rs`).
pub(crate) fn promise_handle(
    lua: &mlua::Lua,
    cell: std::rc::Rc<luau_promise::PromiseCell>,
) -> mlua::Result<mlua::Value> {
    promise_handle::handle(lua, cell)
}

/// A value's type with its article, as error messages name it: `nil`, `a number`, `an integer`.
pub(crate) fn a_type(value: &mlua::Value) -> String {
    match value {
        mlua::Value::Nil => "nil".to_owned(),
        // mlua reads every whole Luau number as `Value::Integer`; Luau calls it a number.
        mlua::Value::Integer(_) => "a number".to_owned(),
        v => {
            let name = v.type_name();
            let article = if name.starts_with(['a', 'e', 'i', 'o', 'u']) {
                "an"
            } else {
                "a"
            };
            format!("{article} {name}")
        }
    }
}

/// Calls `read` with each (key, value) of an options table `opts`, which must be nil or a table;
/// `call` names the function in the refusal. Every options table of the Luau surface is read
/// through it, so an unknown option is refused by its name everywhere. Non-string keys reach
/// `read` as their debug text, so they are refused as unknown options.
pub(crate) fn for_each_option(
    opts: &mlua::Value,
    call: &str,
    mut read: impl FnMut(&str, mlua::Value) -> Result<(), String>,
) -> Result<(), String> {
    let table: &mlua::Table = match opts {
        mlua::Value::Nil => return Ok(()),
        mlua::Value::Table(t) => t,
        other => {
            return Err(format!(
                "{call}: opts must be a table, got {}",
                other.type_name()
            ))
        }
    };
    for pair in table.pairs::<mlua::Value, mlua::Value>() {
        let (key, value) = pair.map_err(|e| e.to_string())?;
        let key_text = match &key {
            mlua::Value::String(s) => s.to_string_lossy(),
            other => format!("{other:?}"),
        };
        read(&key_text, value)?;
    }
    Ok(())
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
