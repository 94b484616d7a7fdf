//! Main scripts and host chunks: [`ScriptDomain::run_file`], [`ScriptDomain::exec`] and
//! [`ScriptDomain::eval`] start code as tasks of the engine VM, and a main script moves the
//! domain through `Loading` (see [`DomainState`]).

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

use mlua::{Lua, MultiValue, Value};

use crate::domain::script_handle::{ChunkSlot, ScriptHandle, ScriptStatus};
use crate::domain::{script_file, DomainState, Report, ReportKind, ScriptDomain};
use crate::error::{Error, Result};
use crate::value::Message;
use crate::vm::{self, Owner};

impl ScriptDomain {
    /// Starts the script at `path` as a task of the engine VM, with `args` as its `...`, and
    /// answers its handle: poll it from a frame loop or [`wait`](ScriptHandle::wait) on it.
    ///
    /// An error it raises, at once or after a yield, is a [`Report`](crate::Report) of kind
    /// [`Script`](crate::ReportKind::Script) in [`take_reports`](Self::take_reports) and in
    /// the result of the frame or advance it happened in; it makes the domain
    /// [`Failed`](DomainState::Failed) when this script decides the state (the domain was
    /// not `Running` when it started), and [`run_until_idle`](Self::run_until_idle) answers
    /// it too.
    ///
    /// # Errors
    /// [`Error::Io`] naming the path when the file can't be read, is not a regular file or is
    /// longer than [`MAX_SOURCE_BYTES`](crate::Plan::MAX_SOURCE_BYTES); [`Error::Script`] when it
    /// does not compile.
    pub fn run_file(&self, path: impl AsRef<Path>, args: &[String]) -> Result<ScriptHandle> {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.run_file_bytes(path, &args)
    }

    /// As [`run_file`](Self::run_file), with arguments as bytes: Luau strings are bytes, so an
    /// argument need not be UTF-8 (a file name from the command line, say).
    ///
    /// ```
    /// use skein::{DomainSpec, Pool, ScriptDomain};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("main.luau");
    /// std::fs::write(&path, "local name = ...\nassert(#name == 4 and string.byte(name, 4) == 0xE9)")?;
    /// let pool = Pool::new(1);
    /// let domain = ScriptDomain::new(&pool, DomainSpec::new("main"))?;
    /// domain.run_file_bytes(&path, &[b"caf\xE9"])?; // Latin-1, not UTF-8
    /// domain.run_until_idle()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// As [`run_file`](Self::run_file).
    pub fn run_file_bytes(&self, path: impl AsRef<Path>, args: &[&[u8]]) -> Result<ScriptHandle> {
        let (path, source) = script_file::read(path.as_ref())?;
        self.run_source_of(&path, &source, args)
    }

    /// As [`run_file`](Self::run_file) for the script `relative` beneath `folder`, opened
    /// through `dir`, the folder's handle ([`script_file::read_beneath`]): a link out of the
    /// folder is refused, not followed.
    ///
    /// # Errors
    /// As [`run_file`](Self::run_file), and [`Error::Io`] for a path that leads outside the
    /// folder.
    pub(crate) fn run_file_beneath(
        &self,
        dir: &cap_std::fs::Dir,
        folder: &Path,
        relative: &str,
    ) -> Result<ScriptHandle> {
        let (path, source) = script_file::read_beneath(dir, folder, relative)?;
        self.run_source_of(&path, &source, &[])
    }

    /// Starts `source`, read from the file `path`, as a main script with `args` as its `...`.
    fn run_source_of(&self, path: &Path, source: &[u8], args: &[&[u8]]) -> Result<ScriptHandle> {
        let name = format!("@{}", path.display());
        let args: Vec<Value> = args
            .iter()
            .map(|a| self.current.vm.lua.create_string(a).map(Value::String))
            .collect::<mlua::Result<_>>()?;
        let label = display_name(path);
        let slot = self.start_chunk(
            source,
            &name,
            &label,
            MultiValue::from_iter(args),
            self.begin_load(),
        )?;
        Ok(ScriptHandle::new(
            format!("script {label}"),
            self.generation(),
            slot,
        ))
    }

    /// A main script starts: a domain that is not running yet is `Loading` until it ends.
    /// Answers whether this script decides the state.
    pub(super) fn begin_load(&self) -> bool {
        let loads = matches!(
            self.life.state.get(),
            DomainState::Ready | DomainState::Failed | DomainState::Created
        );
        if loads {
            self.life.state.set(DomainState::Loading);
        }
        loads
    }

    /// Starts `source` as a task of the engine VM; `require` and `jobs.dispatch` in it resolve
    /// from the plan's root directory. It is a main script named `exec`: an error it raises,
    /// at once or after a yield, is a [`Report`](crate::Report) of kind
    /// [`Script`](crate::ReportKind::Script) and fails the domain as
    /// [`run_file`](Self::run_file) says.
    ///
    /// ```
    /// use skein::lifecycle::DomainState;
    /// use skein::{DomainSpec, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let domain = ScriptDomain::new(&pool, DomainSpec::new("game"))?;
    /// domain.exec("error('boom')")?; // started: the failure is a report, not this call's error
    /// assert_eq!(domain.state(), DomainState::Failed);
    /// let reports = domain.take_reports();
    /// assert_eq!(reports[0].source, "script exec");
    /// assert!(reports[0].message.starts_with("script exec failed: exec:1: boom"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Script`] when it does not compile.
    pub fn exec(&self, source: &str) -> Result<()> {
        self.start_chunk(
            source.as_bytes(),
            "=exec",
            "exec",
            MultiValue::new(),
            self.begin_load(),
        )
        .map(|_| ())
    }

    /// Runs `source` as a task of the engine VM, pumping the domain until it returns, and
    /// answers a copy of what it returned. Meant for tests and tools; frames of other work run
    /// meanwhile. Its failure is its error, not a [`Report`](crate::Report): the host
    /// awaited it.
    ///
    /// # Errors
    /// [`Error::Script`] with the error and Luau stack when it raises; [`Error::Transfer`] when
    /// its result can't be copied.
    pub fn eval(&self, source: &str) -> Result<Message> {
        let slot =
            self.start_chunk(source.as_bytes(), "=eval", "eval", MultiValue::new(), false)?;
        loop {
            if let Some(result) = slot.borrow_mut().answer.take() {
                return result;
            }
            if !self.pump_once(true, false) {
                return Err(Error::Script(
                    "eval: the chunk is waiting on something that will never happen".to_owned(),
                ));
            }
        }
    }

    pub(super) fn start_chunk(
        &self,
        source: &[u8],
        chunk_name: &str,
        label: &str,
        args: MultiValue,
        loads: bool,
    ) -> Result<ChunkSlot> {
        // The chunk may dispatch before its first yield: edits must be seen before it runs.
        vm::check_sources();
        let lua = &self.current.vm.lua;
        let function = vm::source::compile(lua, source, chunk_name).map_err(|e| {
            if loads {
                self.life.state.set(DomainState::Failed);
            }
            Error::Script(vm::error_message(&e))
        })?;
        let slot = ChunkSlot::default();
        let out = slot.clone();
        let failures = self.reporting.failures().clone();
        // An `eval`'s failure is its answer; any other chunk's is a report nobody awaited.
        let reports = (label != "eval").then(|| self.reporting.reports().clone());
        let script = format!("script {label}");
        let state = loads.then(|| self.life.state.clone());
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
            self.current.principal.max_deadline,
            Some(completion),
        ));
        self.current.vm.start(function, args, owner)?;
        Ok(slot)
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

pub(super) fn display_name(path: &Path) -> String {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    path.strip_prefix(&cwd)
        .unwrap_or(path)
        .display()
        .to_string()
}
