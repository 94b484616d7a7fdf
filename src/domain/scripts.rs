//! Main scripts and host chunks: [`ScriptDomain::run_file`], [`ScriptDomain::exec`] and
//! [`ScriptDomain::eval`] start code as tasks of the engine VM, and a main script moves the
//! domain through `Loading` (see [`DomainState`]).

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

use mlua::{Lua, MultiValue, Value};

use crate::domain::{script_file, DomainState, ScriptDomain};
use crate::error::{Error, Result};
use crate::value::Message;
use crate::vm::{self, Owner};

impl ScriptDomain {
    /// Starts the script at `path` as a task of the engine VM, with `args` as its `...`.
    /// Errors it raises later are answered by [`run_until_idle`](Self::run_until_idle).
    ///
    /// # Errors
    /// [`Error::Io`] naming the path when the file can't be read, is not a regular file or is
    /// longer than [`MAX_SOURCE_BYTES`](crate::Plan::MAX_SOURCE_BYTES); [`Error::Script`] when it
    /// does not compile.
    pub fn run_file(&self, path: impl AsRef<Path>, args: &[String]) -> Result<()> {
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
    pub fn run_file_bytes(&self, path: impl AsRef<Path>, args: &[&[u8]]) -> Result<()> {
        let (path, source) = script_file::read(path.as_ref())?;
        let name = format!("@{}", path.display());
        let args: Vec<Value> = args
            .iter()
            .map(|a| self.current.vm.lua.create_string(a).map(Value::String))
            .collect::<mlua::Result<_>>()?;
        self.start_chunk(
            &source,
            &name,
            &display_name(&path),
            MultiValue::from_iter(args),
            self.begin_load(),
        )
        .map(|_| ())
    }

    /// A main script starts: a domain that is not running yet is `Loading` until it ends.
    /// Answers whether this script decides the state.
    pub(super) fn begin_load(&self) -> bool {
        let loads = matches!(
            self.state.get(),
            DomainState::Ready | DomainState::Failed | DomainState::Created
        );
        if loads {
            self.state.set(DomainState::Loading);
        }
        loads
    }

    /// Starts `source` as a task of the engine VM; `require` and `jobs.dispatch` in it resolve
    /// from the plan's root directory.
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
    /// meanwhile.
    ///
    /// # Errors
    /// [`Error::Script`] with the error and Luau stack when it raises; [`Error::Transfer`] when
    /// its result can't be copied.
    pub fn eval(&self, source: &str) -> Result<Message> {
        let slot =
            self.start_chunk(source.as_bytes(), "=eval", "eval", MultiValue::new(), false)?;
        loop {
            if let Some(result) = slot.borrow_mut().take() {
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
    ) -> Result<Rc<RefCell<Option<Result<Message>>>>> {
        // The chunk may dispatch before its first yield: edits must be seen before it runs.
        vm::check_sources();
        let lua = &self.current.vm.lua;
        let function = vm::source::compile(lua, source, chunk_name).map_err(|e| {
            if loads {
                self.state.set(DomainState::Failed);
            }
            Error::Script(vm::error_message(&e))
        })?;
        let slot: Rc<RefCell<Option<Result<Message>>>> = Rc::new(RefCell::new(None));
        let out = slot.clone();
        let failures = self.failures.clone();
        let script = format!("script {label}");
        let state = loads.then(|| self.state.clone());
        let completion: vm::Completion = Box::new(move |_lua: &Lua, result, _commands| {
            if let Some(state) = state.filter(|s| s.get() == DomainState::Loading) {
                state.set(if result.is_ok() {
                    DomainState::Ready
                } else {
                    DomainState::Failed
                });
            }
            let answer = match result {
                Ok(values) => {
                    let first = values.into_iter().next().unwrap_or(Value::Nil);
                    Message::from_lua(&first, "result").map_err(Error::from)
                }
                Err(failure) => {
                    let text = format!("{script} failed: {failure}");
                    failures.borrow_mut().push(text.clone());
                    Err(Error::Script(text))
                }
            };
            *out.borrow_mut() = Some(answer);
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

pub(super) fn display_name(path: &Path) -> String {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    path.strip_prefix(&cwd)
        .unwrap_or(path)
        .display()
        .to_string()
}
