//! What a new generation runs as it is built ([`Load`]), and the load step itself: the chunk
//! starts as a task of the generation's engine VM ([`GenerationState::start_load`]) and is
//! waited for ([`LoadTask::finish`]), the domain pumped meanwhile, until that task ends, its
//! load bound passes, or nothing it waits on can come.
//!
//! Its invariants: a load's task is waited for within the bound from its start, and a load
//! fails at exactly one stage ([`LoadStage`]). Which generation the load runs in, and what
//! happens when it fails, is the restart's or the reload's (`facade_run.rs`).

use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mlua::{Lua, MultiValue, Value};

use crate::domain::generation::GenerationState;
use crate::domain::script_file::display_name;
use crate::error::Error;
use crate::vm::{self, source, LoadStage, Owner};

/// How long a load may take by default, waits included
/// ([`DomainSpec::load_bound`](crate::DomainSpec::load_bound) changes it).
pub(crate) const LOAD_BOUND: Duration = Duration::from_secs(30);

/// What a new generation runs when [`restart`](crate::ScriptDomain::restart) or
/// [`reload`](crate::ScriptDomain::reload) builds it.
///
/// The load is a main script of the new engine VM: it runs as a task, and the domain is pumped
/// (its mailbox drained, its ready tasks resumed, no phase and no registered job run) until
/// that task returns. It may `require` modules, dispatch pool work and await it, bind contexts
/// and named events, and spawn workers. It fails when it does not compile, when it raises, and
/// when it can't end: nothing it waits on can ever come, or it is still waiting after the
/// domain's [load bound](crate::DomainSpec::load_bound).
///
/// ```
/// use skein::lifecycle::Load;
///
/// let load = Load::source("level 2", "level = 2");
/// assert_eq!(load, Load::Source { name: "level 2".into(), source: "level = 2".into() });
/// let file = Load::file("main.luau");
/// assert_eq!(file, Load::File { path: "main.luau".into(), args: vec![] });
/// let fast = Load::file_with_args("main.luau", ["--fast"]);
/// assert_eq!(fast, Load::File { path: "main.luau".into(), args: vec!["--fast".into()] });
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Load {
    /// Nothing: the generation starts empty.
    Nothing,
    /// A Luau chunk; `name` names it in errors and stacks.
    Source {
        /// The chunk's name.
        name: String,
        /// Its source.
        source: String,
    },
    /// The script at `path`, with `args` as its `...`, as
    /// [`run_file`](crate::ScriptDomain::run_file) runs it.
    File {
        /// The script.
        path: PathBuf,
        /// Its arguments.
        args: Vec<String>,
    },
}

impl Load {
    /// [`Load::Source`].
    pub fn source(name: impl Into<String>, source: impl Into<String>) -> Load {
        Load::Source {
            name: name.into(),
            source: source.into(),
        }
    }

    /// [`Load::File`] of the script at `path`, run with no arguments (`...` is empty).
    pub fn file(path: impl Into<PathBuf>) -> Load {
        Load::File {
            path: path.into(),
            args: Vec::new(),
        }
    }

    /// [`Load::File`] of the script at `path`, with `args` as its `...`.
    pub fn file_with_args<S: Into<String>>(
        path: impl Into<PathBuf>,
        args: impl IntoIterator<Item = S>,
    ) -> Load {
        Load::File {
            path: path.into(),
            args: args.into_iter().map(Into::into).collect(),
        }
    }
}

/// A load that failed: where, and its text.
#[derive(Debug)]
pub(crate) struct LoadFailure {
    pub(crate) stage: LoadStage,
    pub(crate) message: String,
}

impl LoadFailure {
    fn new(stage: LoadStage, message: String) -> LoadFailure {
        LoadFailure { stage, message }
    }
}

/// How a load's task ended: `Err` carries the failure's text.
type LoadSlot = Rc<RefCell<Option<Result<(), String>>>>;

impl LoadFailure {
    /// The error a reload answers when its candidate's load failed.
    pub(crate) fn into_reload_error(self) -> Error {
        Error::ReloadFailed {
            stage: self.stage,
            message: self.message,
        }
    }
}

/// A load's task, started in its generation's engine VM and not yet ended.
pub(crate) struct LoadTask {
    slot: LoadSlot,
    /// The script's name in errors: its chunk name, or the file's display name.
    label: String,
}

impl GenerationState {
    /// Starts `load` as a task of this generation's engine VM; `None` for [`Load::Nothing`],
    /// which has nothing to run.
    pub(crate) fn start_load(&self, load: &Load) -> Result<Option<LoadTask>, LoadFailure> {
        let lua = &self.vm.lua;
        let (source, chunk_name, label, args) = match load {
            Load::Nothing => return Ok(None),
            Load::Source { name, source } => (
                source.clone().into_bytes(),
                format!("={name}"),
                name.clone(),
                MultiValue::new(),
            ),
            Load::File { path, args } => {
                let read = std::fs::canonicalize(path)
                    .and_then(|full| source::read_bounded(&full).map(|bytes| (full, bytes)));
                let (full, bytes) = read.map_err(|e| {
                    LoadFailure::new(LoadStage::Read, format!("{}: {e}", path.display()))
                })?;
                let args = args
                    .iter()
                    .map(|a| lua.create_string(a).map(Value::String))
                    .collect::<mlua::Result<MultiValue>>()
                    .map_err(|e| LoadFailure::new(LoadStage::Run, vm::error_message(&e)))?;
                (
                    bytes,
                    format!("@{}", full.display()),
                    display_name(&full),
                    args,
                )
            }
        };
        // The load may dispatch before its first yield: edits must be seen before it runs.
        vm::check_sources();
        let function = source::compile(lua, &source, &chunk_name)
            .map_err(|e| LoadFailure::new(LoadStage::Compile, vm::error_message(&e)))?;
        let slot: LoadSlot = Rc::default();
        let out = slot.clone();
        let script = format!("script {label}");
        let completion: vm::Completion = Box::new(move |_lua: &Lua, result, _commands| {
            *out.borrow_mut() = Some(match result {
                Ok(_) => Ok(()),
                Err(failure) => Err(format!("{script} failed: {failure}")),
            });
        });
        let owner = Rc::new(Owner::new(
            Arc::new(format!("script {label}")),
            self.principal.max_deadline,
            Some(completion),
        ));
        self.vm
            .start(function, args, owner)
            .map_err(|e| LoadFailure::new(LoadStage::Run, vm::error_message(&e)))?;
        Ok(Some(LoadTask { slot, label }))
    }
}

impl LoadTask {
    /// Waits for the task to end, calling `pump` (one round of the domain's pump, blocking no
    /// later than the instant it is given) while it has not, for at most `bound` from now.
    /// Fails when the task raised, when `bound` passes, and when `pump` answers that nothing
    /// can ever come.
    pub(crate) fn finish(
        self,
        bound: Duration,
        mut pump: impl FnMut(Instant) -> bool,
    ) -> Result<(), LoadFailure> {
        let LoadTask { slot, label } = self;
        let until = Instant::now() + bound;
        loop {
            if let Some(ended) = slot.borrow_mut().take() {
                return ended.map_err(|text| LoadFailure::new(LoadStage::Run, text));
            }
            if Instant::now() >= until {
                return Err(LoadFailure::new(
                    LoadStage::Finish,
                    format!(
                        "script {label} was still waiting after the load bound of {} s",
                        vm::format_seconds(bound)
                    ),
                ));
            }
            if !pump(until) {
                return Err(LoadFailure::new(
                    LoadStage::Finish,
                    format!("script {label} is waiting on something that will never happen"),
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_name_themselves_as_verbs() {
        let names: Vec<String> = [
            LoadStage::Read,
            LoadStage::Compile,
            LoadStage::Run,
            LoadStage::Finish,
        ]
        .iter()
        .map(ToString::to_string)
        .collect();
        assert_eq!(names, ["read", "compile", "run", "finish"]);
        assert_eq!(
            Load::file("a.luau"),
            Load::File {
                path: "a.luau".into(),
                args: vec![]
            }
        );
    }
}
