//! `Plan`: the recipe a thread follows to build a VM for a principal.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mlua::{Lua, MultiValue};

use super::builtins::{Builtin, Builtins};
use super::native::NativeMode;
use super::owner::panic_message;
use super::source::MAX_SOURCE_BYTES;
use crate::value::{FromMessage, IntoMessage, Message, MessageArgs};

/// The default memory limit of a VM: 512 MiB.
pub(crate) const DEFAULT_MEMORY_LIMIT: usize = 512 * 1024 * 1024;

/// The default number of tasks of one pool worker's VM that may wait on pool work at once.
pub(crate) const DEFAULT_NESTED_WAITS: usize = 1024;

type HostFn = Arc<dyn Fn(&Lua, MultiValue) -> mlua::Result<MultiValue> + Send + Sync>;
/// A typed host function, behind the conversions: the call's arguments in, its answer out.
type TypedFn = Arc<dyn Fn(Vec<Message>) -> Result<Message, String> + Send + Sync>;

/// A host function as the embedder gave it.
#[derive(Clone)]
enum HostFunction {
    /// Takes and answers mlua values.
    Raw(HostFn),
    /// Takes its arguments copied as messages (each number in its own form) and answers one.
    Typed(TypedFn),
}
type Setup = Arc<dyn Fn(&Lua) -> mlua::Result<()> + Send + Sync>;
type BaseSetup = fn(&Lua) -> mlua::Result<()>;

/// A `Send + Sync` recipe for a sandboxed Luau VM, run on the thread that needs the VM.
///
/// Every VM of a domain (its engine VM and one per pool thread) is built from the domain's plan:
/// the sandbox, the memory limit, the module root and the host functions the embedder added. The
/// plan itself holds no VM, so one plan serves every thread.
///
/// ```
/// use skein::Plan;
///
/// let plan = Plan::new()
///     .memory_limit(64 * 1024 * 1024)
///     .function("hostAdd", |lua, args| {
///         let (a, b): (f64, f64) = lua.unpack_multi(args)?;
///         lua.pack_multi(a + b)
///     });
/// assert_eq!(plan.memory_limit_bytes(), 64 * 1024 * 1024);
/// ```
#[derive(Clone)]
pub struct Plan {
    inner: Arc<PlanInner>,
}

#[derive(Clone)]
struct PlanInner {
    memory_limit: usize,
    nested_waits: usize,
    native: NativeMode,
    root: PathBuf,
    /// Whether `root` is the project root of every `require` of the plan's VMs, whatever
    /// `.luaurc` lies at or above it ([`project_at_root`](Plan::project_at_root)).
    root_is_project: bool,
    functions: Vec<(String, HostFunction)>,
    setup: Vec<Setup>,
    /// Globals the layers above install in every VM before the host's functions and setup
    /// steps (so a host can still replace them), by name, each once.
    base: Vec<(&'static str, BaseSetup)>,
    /// The built-in modules `require` answers by name, which the layers above register.
    builtins: Builtins,
}

impl Plan {
    /// The largest source text a VM compiles (main script, module, load or actor source): 16 MiB, regular files only.
    pub const MAX_SOURCE_BYTES: usize = MAX_SOURCE_BYTES;

    /// How many tasks of one pool worker's VM may wait on pool work at once, unless [`nested_wait_limit`](Self::nested_wait_limit) says otherwise: 1,024.
    pub const DEFAULT_NESTED_WAITS: usize = DEFAULT_NESTED_WAITS;

    /// The memory limit of a VM built from a plan that sets none: 512 MiB.
    pub const DEFAULT_MEMORY_LIMIT: usize = DEFAULT_MEMORY_LIMIT;

    /// A plan with the default memory limit (512 MiB), the current directory as module root and
    /// no host functions.
    pub fn new() -> Plan {
        Plan {
            inner: Arc::new(PlanInner {
                memory_limit: DEFAULT_MEMORY_LIMIT,
                nested_waits: DEFAULT_NESTED_WAITS,
                native: NativeMode::Annotated,
                root: std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
                root_is_project: false,
                functions: Vec::new(),
                setup: Vec::new(),
                base: Vec::new(),
                builtins: Builtins::default(),
            }),
        }
    }

    fn edit(mut self, f: impl FnOnce(&mut PlanInner)) -> Plan {
        f(Arc::make_mut(&mut self.inner));
        self
    }

    /// Sets the memory limit of each VM, in bytes. A job that allocates past it fails with an
    /// out-of-memory error and the VM serves on.
    pub fn memory_limit(self, bytes: usize) -> Plan {
        self.edit(|p| p.memory_limit = bytes)
    }

    /// Sets how many tasks of one pool worker's VM may wait on pool work at once (awaits of
    /// `jobs.dispatch`, `jobs.parallelFor`, `jobs.map` and `jobs.warm` promises inside jobs); 1024 by
    /// default. A job that awaits pool work parks, and its worker runs other items meanwhile,
    /// perhaps the ones it waits for; an entry that awaits work of its own kind without end
    /// (`parallelFor` over itself) would park jobs without bound. The await past the limit
    /// raises instead, which fails that job, and the failure settles every promise above it.
    /// The engine VM and `@skein/worker` VMs have no such limit: their waits hold no pool thread.
    ///
    /// ```
    /// use skein::Plan;
    ///
    /// assert_eq!(Plan::new().nested_wait_limit_tasks(), Plan::DEFAULT_NESTED_WAITS);
    /// let plan = Plan::new().nested_wait_limit(64);
    /// assert_eq!(plan.nested_wait_limit_tasks(), 64);
    /// ```
    pub fn nested_wait_limit(self, tasks: usize) -> Plan {
        self.edit(|p| p.nested_waits = tasks)
    }

    /// How many tasks of one pool worker's VM may wait on pool work at once.
    pub fn nested_wait_limit_tasks(&self) -> usize {
        self.inner.nested_waits
    }

    /// Sets which code the plan's VMs compile to native machine code: by default
    /// [`NativeMode::Annotated`], the modules and scripts that start with `--!native` and the
    /// functions marked `@native`. Each VM compiles a module once, when it first runs it; the
    /// bytecode stays shared. Where the platform has no code generator every mode runs the
    /// interpreter ([`NativeMode::code_generator`]).
    ///
    /// ```
    /// use skein::{NativeMode, Plan};
    ///
    /// let plan = Plan::new().native(NativeMode::Off);
    /// assert_eq!(plan.native_mode(), NativeMode::Off);
    /// ```
    pub fn native(self, mode: NativeMode) -> Plan {
        self.edit(|p| p.native = mode)
    }

    /// Which code the plan's VMs compile to native machine code.
    pub fn native_mode(&self) -> NativeMode {
        self.inner.native
    }

    /// Sets the directory that code with no file of its own (host snippets) requires from.
    pub fn root(self, dir: impl Into<PathBuf>) -> Plan {
        let dir = dir.into();
        self.edit(|p| p.root = dir)
    }

    /// Makes the plan's root the project root of every `require` its VMs run, the main
    /// scripts' and modules' as well as host snippets': a module is required only from below
    /// the root, and a `.luaurc` at or above it widens nothing. A resource host roots each
    /// resource's plan at its folder this way, so one resource can't require another's files.
    pub(crate) fn project_at_root(self) -> Plan {
        self.edit(|p| p.root_is_project = true)
    }

    /// The project root every `require` of the plan's VMs is confined below, when the plan
    /// fixes one ([`project_at_root`](Self::project_at_root)).
    pub(crate) fn fixed_project(&self) -> Option<&Path> {
        self.inner
            .root_is_project
            .then_some(self.inner.root.as_path())
    }

    /// Adds a global function implemented by the host. A panic inside it is contained: the Luau
    /// caller gets an error naming the function, and the thread serves on.
    pub fn function<F>(self, name: &str, f: F) -> Plan
    where
        F: Fn(&Lua, MultiValue) -> mlua::Result<MultiValue> + Send + Sync + 'static,
    {
        let name = name.to_owned();
        self.edit(|p| p.functions.push((name, HostFunction::Raw(Arc::new(f)))))
    }

    /// Adds a global function implemented by the host that takes typed arguments and answers a
    /// typed value, as [`ScriptDomain::register_query`](crate::ScriptDomain::register_query)
    /// does: the arguments are copied as [`Message`]s (within the bound of one copy,
    /// [`Limits::MAX_MESSAGE_BYTES`](crate::message::Limits::MAX_MESSAGE_BYTES)) and read as `A`, a
    /// tuple by position; the answer is made a `Message` and copied into the caller's VM. An
    /// argument that does not convert is raised naming it, and so are an `Err` and a contained
    /// panic. Unlike [`function`](Self::function), it never sees a VM: it suits a pure
    /// function of plain data.
    ///
    /// ```
    /// use skein::{DomainSpec, Message, Plan, Pool, ScriptDomain};
    ///
    /// let plan = Plan::new().typed_function("lerp", |(a, b, t): (f64, f64, f64)| {
    ///     Ok(a + (b - a) * t)
    /// });
    /// let pool = Pool::new(1);
    /// let domain = ScriptDomain::new(&pool, DomainSpec::new("main").plan(plan))?;
    /// assert_eq!(domain.eval("return lerp(0, 10, 0.25)")?, Message::Number(2.5));
    /// let err = domain.eval("return lerp(0, 10)").unwrap_err().to_string();
    /// assert!(err.contains(
    ///     "host function 'lerp' failed: args[3]: expected a number (or an integer within ±2^53), got nil"
    /// ));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn typed_function<A, R, F>(self, name: &str, f: F) -> Plan
    where
        A: FromMessage,
        R: IntoMessage,
        F: Fn(A) -> Result<R, String> + Send + Sync + 'static,
    {
        let name = name.to_owned();
        let typed: TypedFn = Arc::new(move |args: Vec<Message>| {
            let args = A::from_args(args).map_err(|e| e.to_string())?;
            f(args)?
                .into_message()
                .map_err(|e| format!("its answer: {e}"))
        });
        self.edit(|p| p.functions.push((name, HostFunction::Typed(typed))))
    }

    /// Adds a step run on each new VM after the prelude, before the sandbox closes the globals.
    pub fn setup<F>(self, f: F) -> Plan
    where
        F: Fn(&Lua) -> mlua::Result<()> + Send + Sync + 'static,
    {
        self.edit(|p| p.setup.push(Arc::new(f)))
    }

    /// Adds a step, named `name`, that runs in every VM of the plan before the host's
    /// functions and setup steps, so those can replace what it installs; a name given again
    /// keeps the first. The layers above `vm` install their globals here (the domain's `print`).
    pub(crate) fn base_setup(self, name: &'static str, f: BaseSetup) -> Plan {
        if self.inner.base.iter().any(|(n, _)| *n == name) {
            return self;
        }
        self.edit(|p| p.base.push((name, f)))
    }

    /// Adds built-in modules that `require` answers by name in every VM of the plan; a name
    /// given again takes the later builder. The layers above `vm` register theirs here.
    pub(crate) fn builtins(self, modules: &[Builtin]) -> Plan {
        self.edit(|p| p.builtins = p.builtins.with(modules))
    }

    /// The built-in modules of the plan.
    pub(crate) fn builtin_modules(&self) -> &Builtins {
        &self.inner.builtins
    }

    /// The memory limit of each VM, in bytes.
    pub fn memory_limit_bytes(&self) -> usize {
        self.inner.memory_limit
    }

    /// The module root.
    pub fn root_dir(&self) -> &Path {
        &self.inner.root
    }

    /// Installs the host functions and setup steps into `lua`.
    pub(crate) fn install(&self, lua: &Lua) -> mlua::Result<()> {
        for (_, base) in &self.inner.base {
            base(lua)?;
        }
        let globals = lua.globals();
        for (name, f) in &self.inner.functions {
            let fname = name.clone();
            let panicked = move |payload| {
                mlua::Error::runtime(format!(
                    "host function '{fname}' panicked: {}",
                    panic_message(&payload)
                ))
            };
            let function = match f {
                HostFunction::Raw(f) => {
                    let f = f.clone();
                    lua.create_function(move |lua, args: MultiValue| {
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(lua, args)))
                            .unwrap_or_else(|payload| Err(panicked(payload)))
                    })?
                }
                HostFunction::Typed(f) => {
                    let f = f.clone();
                    let fname = name.clone();
                    lua.create_function(move |_, args: MessageArgs| {
                        let args = args
                            .into_list()
                            .map_err(|e| mlua::Error::runtime(format!("{fname}: {e}")))?;
                        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(args))) {
                            Ok(Ok(answer)) => Ok(answer),
                            Ok(Err(e)) => Err(mlua::Error::runtime(format!(
                                "host function '{fname}' failed: {e}"
                            ))),
                            Err(payload) => Err(panicked(payload)),
                        }
                    })?
                }
            };
            globals.raw_set(name.as_str(), function)?;
        }
        for setup in &self.inner.setup {
            setup(lua)?;
        }
        Ok(())
    }
}

impl Default for Plan {
    fn default() -> Self {
        Plan::new()
    }
}

impl fmt::Debug for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plan")
            .field("memory_limit", &self.inner.memory_limit)
            .field("nested_waits", &self.inner.nested_waits)
            .field("native", &self.inner.native)
            .field("root", &self.inner.root)
            .field(
                "functions",
                &self
                    .inner
                    .functions
                    .iter()
                    .map(|(n, _)| n.as_str())
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}
