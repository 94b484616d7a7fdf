//! The VM side of module loading: the `require` global, `jobs.dispatch`'s module lookup, and
//! the process-wide *source epoch* that carries edits to every VM.
//!
//! Resolution and compilation live in [`loader`]. This file adds what a VM needs
//! on the dispatch path: each item names its module by absolute path, and a worker answers the
//! module's export table from a per-VM map without touching the file system. The map is trusted
//! only while the source epoch is unchanged. A write through `@skein/fs` bumps the epoch before
//! it returns ([`source_written`]), so a script's own edit reaches every dispatch made after
//! it; the engine thread bumps it too when it finds a source edited from outside (it looks each
//! time the host enters the domain, and every 250 ms while the domain runs), so those edits
//! reach the next dispatch without a `stat` per item.

use rustc_hash::FxHashMap as HashMap;
use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use mlua::{Lua, Value};

use super::builtins::Builtins;
use super::core::VmCore;
use super::loader::{self, project, BytecodeCache, ModuleCache};

static SOURCE_EPOCH: AtomicU64 = AtomicU64::new(0);

/// The current source epoch.
pub(crate) fn source_epoch() -> u64 {
    SOURCE_EPOCH.load(Ordering::Acquire)
}

/// Looks for edited module sources; bumps the epoch when one changed. Answers whether it did.
pub(crate) fn check_sources() -> bool {
    if BytecodeCache::global().any_changed() {
        SOURCE_EPOCH.fetch_add(1, Ordering::AcqRel);
        true
    } else {
        false
    }
}

/// A script wrote the file at `path` (through `@skein/fs`): the bytecode compiled from it is
/// dropped and the epoch bumped before the write returns, so every dispatch and `require` made
/// after it, on any VM, runs the new text. Edits from outside the process are found by
/// [`check_sources`] instead.
pub(crate) fn source_written(path: &Path) {
    // The name is looked up only to find the cache's key (canonical paths): the write itself
    // went through the grant's directory handle.
    if let Ok(canonical) = std::fs::canonicalize(path) {
        BytecodeCache::global().forget(&canonical);
    }
    SOURCE_EPOCH.fetch_add(1, Ordering::AcqRel);
}

/// The modules one caller resolved, by specifier.
type Resolutions = HashMap<Arc<str>, Arc<Path>>;

/// A resolved module: its file, and the specifier as the caller wrote it (shared, for names).
#[derive(Clone)]
pub(crate) struct Resolved {
    pub(crate) path: Arc<Path>,
    pub(crate) spec: Arc<str>,
}

/// The modules of one VM.
pub(crate) struct Modules {
    root: PathBuf,
    /// The project root of every resolution, when the plan fixes one (canonical); else each
    /// file's own, found from `.luaurc` ([`project::root_of_file`]).
    project: Option<Arc<Path>>,
    /// The built-in modules, looked up before any file.
    builtins: Builtins,
    cache: RefCell<ModuleCache>,
    /// Module values by path, valid while `epoch` is the source epoch.
    /// Keyed by the path's bytes: hashing a `Path` walks its components, which showed in the
    /// dispatch profile.
    exports: RefCell<HashMap<Box<[u8]>, Value>>,
    /// Resolutions by the caller's chunk name (`@/abs/file.luau`, or `""` for host code), then
    /// by specifier: looked up with borrowed strings, so a hit allocates nothing.
    resolved: RefCell<HashMap<Box<str>, Resolutions>>,
    epoch: Cell<u64>,
    /// Bumped whenever `resolved` is cleared: a resolution kept outside is valid while it is
    /// unchanged ([`Modules::generation`]).
    generation: Cell<u64>,
}

impl Modules {
    pub(crate) fn new(root: PathBuf, project: Option<&Path>, builtins: Builtins) -> Modules {
        let project =
            project.map(|p| Arc::from(std::fs::canonicalize(p).unwrap_or_else(|_| p.to_owned())));
        Modules {
            root,
            project,
            builtins,
            cache: RefCell::new(ModuleCache::new(BytecodeCache::global())),
            exports: RefCell::new(HashMap::default()),
            resolved: RefCell::new(HashMap::default()),
            epoch: Cell::new(source_epoch()),
            generation: Cell::new(0),
        }
    }

    /// Forgets what an edit may have changed, if the source epoch moved.
    fn sync_epoch(&self) {
        let now = source_epoch();
        if self.epoch.get() != now {
            self.epoch.set(now);
            self.exports.borrow_mut().clear();
            self.resolved.borrow_mut().clear();
            self.generation.set(self.generation.get() + 1);
            self.cache.borrow_mut().invalidate_changed();
        }
    }

    /// Drops modules whose source changed on disk.
    pub(crate) fn invalidate_changed(&self) {
        self.exports.borrow_mut().clear();
        self.resolved.borrow_mut().clear();
        self.generation.set(self.generation.get() + 1);
        self.cache.borrow_mut().invalidate_changed();
    }

    /// Which resolutions hold: a resolution kept from [`resolve`](Self::resolve) is what it
    /// would answer again while this is unchanged (an edit moves it).
    pub(crate) fn generation(&self) -> u64 {
        self.sync_epoch();
        self.generation.get()
    }

    /// Resolves `spec` as `require` would from the chunk named `source` (`@/abs/file.luau`;
    /// any other chunk, and host code with `None`, resolves from the plan's root directory).
    pub(crate) fn resolve(&self, source: Option<&str>, spec: &str) -> Result<Resolved, String> {
        self.sync_epoch();
        let source = source.unwrap_or("");
        let hit = self
            .resolved
            .borrow()
            .get(source)
            .and_then(|m| m.get_key_value(spec))
            .map(|(spec, path)| Resolved {
                path: path.clone(),
                spec: spec.clone(),
            });
        if let Some(hit) = hit {
            return Ok(hit);
        }
        let (from, project) = match source.strip_prefix('@') {
            Some(file) => {
                let file = PathBuf::from(file);
                let project = match &self.project {
                    Some(fixed) => fixed.clone(),
                    None => project::root_of_file(&file),
                };
                (file, project)
            }
            None => (
                self.root.clone(),
                match &self.project {
                    Some(fixed) => fixed.clone(),
                    None => project::root_of_folder(&self.root),
                },
            ),
        };
        let path: Arc<Path> = loader::resolve(&from, spec)
            .map_err(|e| project::confine_error(e, &project, spec, &from).to_string())?
            .into();
        // Confined before anything is read or compiled; the module then requires under the
        // same project root, on whichever VM it runs.
        project::check(&path, &project, spec, &from).map_err(|e| e.to_string())?;
        project::register(&path, &project);
        let spec: Arc<str> = spec.into();
        self.resolved
            .borrow_mut()
            .entry(source.into())
            .or_default()
            .insert(spec.clone(), path.clone());
        Ok(Resolved { path, spec })
    }

    /// The value of the module at `path` (absolute, as `resolve` answers), loading it once.
    pub(crate) fn require_path(&self, lua: &Lua, path: &Path) -> mlua::Result<Value> {
        self.sync_epoch();
        let key = path.as_os_str().as_encoded_bytes();
        if let Some(value) = self.exports.borrow().get(key) {
            return Ok(value.clone());
        }
        // Compiling a large module (to bytecode, then to native code) can take longer than a
        // stall check's quiet interval: it counts as the VM running.
        let running = VmCore::of(lua)?.sched.borrow().counted_as_running();
        let value = running
            .run(|| ModuleCache::require(&self.cache, lua, path))
            .map_err(|e| e.into_lua_error())?;
        self.exports.borrow_mut().insert(key.into(), value.clone());
        Ok(value)
    }
}

/// Calls `f` with the chunk name of the script function that called the running Rust callback
/// (`@/abs/file.luau` for a module), borrowed from the VM's debug info; `None` when no script
/// function is on the running thread's stack (a task spawned straight onto `require`), which
/// resolves from the plan's root.
///
/// One `lua_getinfo(level, "s")` read in place per level, and a direct call needs one:
/// `Lua::inspect_stack` followed by `Debug::source` made two queries and copied the short
/// source and the kind too (about 1,200 instructions on every `jobs.dispatch`).
pub(crate) fn with_caller_source<R>(lua: &Lua, f: impl FnOnce(Option<&str>) -> R) -> R {
    // SAFETY: `raw.state()` is the running thread of this VM, borrowed for this call only.
    lua.exec_raw_lua(|raw| unsafe { caller_source_of(raw.state(), f) })
}

/// [`with_caller_source`] on the thread `state`, for a raw C function running on it.
///
/// # Safety
/// `state` is a running thread of the VM (see [`caller_chunk`]).
pub(crate) unsafe fn caller_source_of<R>(
    state: *mut mlua::ffi::lua_State,
    f: impl FnOnce(Option<&str>) -> R,
) -> R {
    // SAFETY: forwarded; the bytes are used before this call returns.
    match unsafe { caller_chunk(state) } {
        None => f(None),
        Some(bytes) => match std::str::from_utf8(bytes) {
            Ok(source) => f(Some(source)),
            Err(_) => f(Some(&String::from_utf8_lossy(bytes))),
        },
    }
}

/// The chunk name of the nearest script function on `state`'s stack, as bytes read in place.
///
/// # Safety
/// `state` is a running thread of the VM. `lua_getinfo` with "s" only reads the frame at
/// `level` (or answers 0 when there is none) and fills `ar`, which lives on this stack: it
/// raises no error and pushes nothing. The bytes live as long as that frame's function: the
/// caller uses them before the running call returns.
pub(crate) unsafe fn caller_chunk<'a>(state: *mut mlua::ffi::lua_State) -> Option<&'a [u8]> {
    // SAFETY: see above.
    let mut ar = unsafe { std::mem::zeroed::<mlua::ffi::lua_Debug>() };
    // The nearest Luau function that is not Skein's own: `pcall(require, "./x")` has
    // `pcall` at level 1, and the file that called it above; Skein's prelude and bindings
    // (chunks named `=skein...`) call on behalf of the script below them.
    for level in 1..=MAX_CALLER_LEVELS {
        // SAFETY: as above.
        let found = unsafe { mlua::ffi::lua_getinfo(state, level, c"s".as_ptr(), &mut ar) } != 0;
        if !found || ar.source.is_null() {
            return None;
        }
        // SAFETY: a non-null `source` points at the NUL-terminated chunk name of that
        // frame's function, which the frame keeps alive while the running call runs.
        let bytes = unsafe { std::ffi::CStr::from_ptr(ar.source) }.to_bytes();
        if bytes == b"=[C]" || bytes.starts_with(b"=skein") {
            continue;
        }
        return Some(bytes);
    }
    None
}

/// How far up the stack [`with_caller_source`] looks for the script that called.
const MAX_CALLER_LEVELS: i32 = 16;

/// Installs the `require` global: the plan's built-in modules by name (`@skein/jobs`,
/// `@skein/events`...), and Luau's require-by-string through Skein's loader for the rest.
pub(crate) fn install_require(lua: &Lua) -> mlua::Result<()> {
    let require = lua.create_function(|lua, spec: Value| {
        let spec = match &spec {
            Value::String(s) => match s.to_str() {
                Ok(text) => text.to_owned(),
                Err(_) => return Err(mlua::Error::runtime("require: path must be UTF-8 text")),
            },
            other => {
                return Err(mlua::Error::runtime(format!(
                    "require: path must be a string, got {}",
                    super::a_type(other)
                )))
            }
        };
        let core = VmCore::of(lua)?;
        if let Some(build) = core.modules.builtins.find(&spec) {
            return build(lua);
        }
        let resolved = with_caller_source(lua, |source| core.modules.resolve(source, &spec))
            .map_err(mlua::Error::runtime)?;
        core.modules.require_path(lua, &resolved.path)
    })?;
    lua.globals().raw_set("require", require)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use mlua::{Function, Lua, Value};

    use crate::vm::{error_message, Builtin, Plan, Vm};

    fn answer(lua: &Lua) -> mlua::Result<Value> {
        Ok(Value::String(lua.create_string("built in")?))
    }

    fn vm(plan: &Plan) -> Vm {
        Vm::build(
            plan,
            Box::new(|_, _| {}),
            Duration::from_secs(5),
            |_| Ok(()),
        )
        .unwrap()
    }

    fn require(vm: &Vm, spec: &str) -> mlua::Result<Value> {
        let require: Function = vm.lua.globals().get("require").unwrap();
        require.call(spec)
    }

    #[test]
    fn require_answers_the_plan_s_built_ins_and_sends_other_names_to_the_loader() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let plan = Plan::new().root(&root).builtins(&[Builtin {
            name: "@skein/answer",
            build: answer,
        }]);
        let with = vm(&plan);
        let got = require(&with, "@skein/answer").unwrap();
        assert_eq!(got.to_string().unwrap(), "built in");
        // A name no layer registered is not a built-in: the loader refuses it as the alias it
        // reads as, and a VM whose plan has none refuses a registered name the same way.
        let unknown = |spec: &str| {
            format!(
                "unknown alias '@skein' in require path '{spec}' from {}: no .luaurc above it \
                 defines it",
                root.display()
            )
        };
        let err = require(&with, "@skein/nope").unwrap_err();
        assert_eq!(error_message(&err), unknown("@skein/nope"));
        let without = vm(&Plan::new().root(&root));
        let err = require(&without, "@skein/answer").unwrap_err();
        assert_eq!(error_message(&err), unknown("@skein/answer"));
    }
}
