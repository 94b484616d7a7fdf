//! Main scripts and host chunks: starting code as tasks of a generation's engine VM
//! ([`start_chunk`], [`run_source`]) for [`ScriptDomain::run_file`](crate::ScriptDomain::run_file),
//! [`ScriptDomain::exec`](crate::ScriptDomain::exec) and
//! [`ScriptDomain::eval`](crate::ScriptDomain::eval), and the domain's state a main script
//! decides as it starts ([`begin_load`]) and ends (`settle_state`; see [`DomainState`]).
//!
//! Its invariants: a chunk that decides the state moves the domain through `Loading` and
//! settles it at its end; a chunk's failure is recorded once among the script failures and,
//! but for an `eval`'s (its failure is its answer), kept once as a report. The functions take
//! the parts they use (the generation, the reporting part, the state) as arguments.

use std::cell::Cell;
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;

use mlua::{Lua, MultiValue, Value};

use crate::domain::generation::GenerationState;
use crate::domain::reporting::Reporting;
use crate::domain::script_file::display_name;
use crate::domain::script_handle::{ChunkSlot, ScriptHandle, ScriptStatus};
use crate::domain::{DomainState, Report, ReportKind};
use crate::error::{Error, Result};
use crate::value::Message;
use crate::vm::{self, Owner};

/// Starts `source`, read from the file `path`, as a main script of `current`'s engine VM with
/// `args` as its `...`, and answers its handle. The script decides the domain's `state` as
/// [`begin_load`] says.
pub(super) fn run_source(
    current: &GenerationState,
    reporting: &Reporting,
    state: &Rc<Cell<DomainState>>,
    path: &Path,
    source: &[u8],
    args: &[&[u8]],
) -> Result<ScriptHandle> {
    let name = format!("@{}", path.display());
    let args: Vec<Value> = args
        .iter()
        .map(|a| current.vm.lua.create_string(a).map(Value::String))
        .collect::<mlua::Result<_>>()?;
    let label = display_name(path);
    let decides = begin_load(state).then_some(state);
    let slot = start_chunk(
        current,
        reporting,
        decides,
        source,
        &name,
        &label,
        MultiValue::from_iter(args),
    )?;
    Ok(ScriptHandle::new(
        format!("script {label}"),
        current.generation(),
        slot,
    ))
}

/// A main script starts: a domain that is not running yet is `Loading` until it ends.
/// Answers whether this script decides the state.
pub(super) fn begin_load(state: &Cell<DomainState>) -> bool {
    let loads = matches!(
        state.get(),
        DomainState::Ready | DomainState::Failed | DomainState::Created
    );
    if loads {
        state.set(DomainState::Loading);
    }
    loads
}

/// Starts `source` as a task of `current`'s engine VM, named `chunk_name` in errors and
/// `script <label>` in reports. Its failure is recorded in `reporting`'s script failures and,
/// but for an `eval`'s (its failure is its answer), kept as a report. With `decides` (the
/// domain's state, when the chunk decides it) a chunk that does not compile fails the domain,
/// and its end settles the state ([`settle_state`]).
pub(super) fn start_chunk(
    current: &GenerationState,
    reporting: &Reporting,
    decides: Option<&Rc<Cell<DomainState>>>,
    source: &[u8],
    chunk_name: &str,
    label: &str,
    args: MultiValue,
) -> Result<ChunkSlot> {
    // The chunk may dispatch before its first yield: edits must be seen before it runs.
    vm::check_sources();
    let lua = &current.vm.lua;
    let function = vm::source::compile(lua, source, chunk_name).map_err(|e| {
        if let Some(state) = decides {
            state.set(DomainState::Failed);
        }
        Error::Script(vm::error_message(&e))
    })?;
    let slot = ChunkSlot::default();
    let out = slot.clone();
    let failures = reporting.failures().clone();
    // An `eval`'s failure is its answer; any other chunk's is a report nobody awaited.
    let reports = (label != "eval").then(|| reporting.reports().clone());
    let script = format!("script {label}");
    let state = decides.cloned();
    let completion: vm::Completion = Box::new(move |_lua: &Lua, result, _commands| {
        if let Some(state) = state {
            settle_state(&state, result.is_ok());
        }
        let (status, answer) = match result {
            Ok(values) => {
                let first = values.into_iter().next().unwrap_or(Value::Nil);
                let answer = Message::from_lua(&first, "result").map_err(Error::from);
                (ScriptStatus::Returned, answer)
            }
            Err(failure) => {
                let text = format!("{script} failed: {failure}");
                failures.borrow_mut().push(text.clone());
                let report = Report::new(ReportKind::Script, script.as_str(), text.as_str());
                let status = ScriptStatus::Failed(report.message.clone());
                if let Some(reports) = reports {
                    reports.borrow_mut().push(report);
                }
                (status, Err(Error::Script(text)))
            }
        };
        let mut end = out.borrow_mut();
        end.status = Some(status);
        end.answer = Some(answer);
    });
    let owner = Rc::new(Owner::new(
        Arc::new(format!("script {label}")),
        current.principal.max_deadline,
        Some(completion),
    ));
    current.vm.start(function, args, owner)?;
    Ok(slot)
}

/// The answer of an `eval` chunk started into `slot`, calling `pump` (one blocking round of
/// the domain's pump, answering false when nothing can ever come) until it is there.
pub(super) fn await_answer(slot: &ChunkSlot, mut pump: impl FnMut() -> bool) -> Result<Message> {
    loop {
        if let Some(result) = slot.borrow_mut().answer.take() {
            return result;
        }
        if !pump() {
            return Err(Error::Script(
                "eval: the chunk is waiting on something that will never happen".to_owned(),
            ));
        }
    }
}

/// The state a main script that decided the domain's state leaves at its end: a loaded
/// domain is `Ready`; one that raised is `Failed`, whether it raised while loading or after
/// frames began (a stopping or stopped domain stays so).
fn settle_state(state: &Cell<DomainState>, returned: bool) {
    let next = match (state.get(), returned) {
        (DomainState::Loading, true) => DomainState::Ready,
        (DomainState::Loading | DomainState::Ready | DomainState::Running, false) => {
            DomainState::Failed
        }
        (unchanged, _) => unchanged,
    };
    state.set(next);
}
