//! Native code: which Luau functions a VM compiles to machine code, and the one place it does.
//!
//! The crate's `native` feature builds Luau with its code generator (mlua-sys's `luau-codegen`,
//! on platforms that have one: x86-64 and AArch64), and not mlua's `luau-jit`, which would make
//! a code generator inside every `Lua::new` and compile every chunk as it loads. Skein compiles
//! here instead, after each load of a script or a module version (once per module per VM: the
//! module cache runs a body once), as the plan's [`NativeMode`] says, and makes the VM's code
//! generator (`luau_codegen_create`) only when it first compiles something: a VM that never runs
//! native code pays nothing for it. The bytecode itself stays shared by every VM; only the
//! machine code is each VM's own.
//!
//! Making the generator after the VM has run code is legal: `luau_codegen_create` only fills the
//! VM's execution callbacks (`lua_ExecutionCallbacks`), which the interpreter consults for
//! functions that have native code, and every function loaded before it has none.
//!
//! What the generator is given is Luau's choice from there: `luau_codegen_compile` compiles
//! every function of the chunk but those Luau deems cold (a top level without loops), unless
//! some function is marked `@native`, in which case it compiles only those.
//!
//! # Memory
//!
//! The machine code lives outside the VM's heap, so the VM's memory limit does not count it.
//! Luau's code allocator (`CodeAllocator.cpp`) maps each VM's own executable memory in blocks,
//! as needed: the first when the generator is made (for its entry gate and helpers), the next
//! when a module's code no longer fits. It never reuses freed code within a VM, so a VM that
//! reloads native modules again and again only grows, until it is retired. Luau's C API makes
//! a generator with blocks of 4 MiB and at most 256 MiB of them per VM; Skein makes it through
//! its own shim (`native_shim.cpp`, Luau's C++ `CodeGen::create`) with two explicit bounds:
//!
//! - [`NATIVE_CODE_PER_VM`]: the executable memory one VM's generator may map, 16 MiB (four
//!   blocks of [`NATIVE_CODE_BLOCK`], 4 MiB). Luau enforces it: a module whose code would need
//!   a block past it fails to compile and runs interpreted.
//! - [`NATIVE_BYTECODE_PER_VM`]: the bytecode one VM hands the generator, 4 MiB, which bounds
//!   the compile work too; a chunk that would pass it runs interpreted.
//!
//! The generator reports each block it maps and unmaps to [`code_pages`], so the executable
//! bytes a VM holds are known exactly (at block granularity: what is mapped, not what is
//! written). A worker's VMs add their figures to its [`NativeTally`], which `Pool::stats()`
//! and `jobs.stats()` show.

use std::cell::{Cell, OnceCell};
#[cfg(feature = "native")]
use std::ffi::{c_int, c_void};
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
#[cfg(feature = "native")]
use std::sync::OnceLock;

#[cfg(feature = "native")]
use mlua::ffi;
use mlua::{Function, Lua};

use super::native_hint::Annotation;

/// The most bytecode (in bytes) one VM hands to the code generator over its life: 4 MiB. It
/// bounds the generator's work; a chunk that would pass it runs interpreted.
pub(crate) const NATIVE_BYTECODE_PER_VM: usize = 4 << 20;

/// The size of one block of executable memory a VM's code generator maps: 4 MiB, Luau's own
/// default (`LuauCodeGenBlockSize`). A module's machine code must fit in one block.
#[cfg(feature = "native")]
pub(crate) const NATIVE_CODE_BLOCK: usize = 4 << 20;

/// The most executable memory (in bytes) one VM's code generator maps: 16 MiB, four blocks.
/// Luau's allocator refuses a block past it, and the module that needed it runs interpreted.
#[cfg(feature = "native")]
pub(crate) const NATIVE_CODE_PER_VM: usize = 4 * NATIVE_CODE_BLOCK;

/// Which Luau code a VM compiles to native machine code.
///
/// Native code runs numeric loops several times faster than Luau's interpreter (the Mandelbrot
/// kernel of `examples/mandelbrot/rows.luau` about 5.7x, see `docs/performance.md`); deadlines,
/// cancel and the memory limit hold in it exactly as in interpreted code. Where the platform has
/// no code generator ([`NativeMode::code_generator`] is `None`) every mode runs the interpreter
/// and nothing fails.
///
/// ```
/// use skein::{NativeMode, Plan};
///
/// assert_eq!(Plan::new().native_mode(), NativeMode::Annotated);
/// let plan = Plan::new().native(NativeMode::All);
/// assert_eq!(plan.native_mode(), NativeMode::All);
/// println!("{}", NativeMode::All.in_use()); // "native: all (x86_64 code generator)"
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum NativeMode {
    /// Everything runs interpreted.
    Off,
    /// The default: modules and scripts that start with the `--!native` hot comment, and
    /// functions marked `@native`, are compiled, as Luau's own tooling does. The rest runs
    /// interpreted.
    #[default]
    Annotated,
    /// Every module and script is compiled (as if each started with `--!native`, but compiled at
    /// Skein's usual optimisation level; a module that marks functions `@native` still has only
    /// those compiled, as Luau decides).
    All,
}

impl NativeMode {
    /// The code generator this platform has: the architecture's name (`"x86_64"`,
    /// `"aarch64"`), or `None` where Luau has none and everything runs interpreted.
    pub fn code_generator() -> Option<&'static str> {
        supported().then_some(std::env::consts::ARCH)
    }

    /// What a VM built in this mode runs, in words, as `skein --version` and `jobs.stats()`
    /// print it: `native: annotated (x86_64 code generator)`, `interpreter (native code off)`
    /// or `interpreter (no code generator on this platform)`.
    pub fn in_use(self) -> String {
        match (self, NativeMode::code_generator()) {
            (NativeMode::Off, _) => "interpreter (native code off)".to_owned(),
            _ if !cfg!(feature = "native") => {
                "interpreter (built without the `native` feature)".to_owned()
            }
            (mode, Some(arch)) => format!("native: {mode} ({arch} code generator)"),
            (_, None) => "interpreter (no code generator on this platform)".to_owned(),
        }
    }
}

impl fmt::Display for NativeMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NativeMode::Off => "off",
            NativeMode::Annotated => "annotated",
            NativeMode::All => "all",
        })
    }
}

/// Whether Luau has a code generator on this platform (asked once).
#[cfg(feature = "native")]
fn supported() -> bool {
    static SUPPORTED: OnceLock<bool> = OnceLock::new();
    // SAFETY: a pure query of the build's target, with no state.
    *SUPPORTED.get_or_init(|| unsafe { ffi::luau_codegen_supported() } != 0)
}

/// Built without the `native` feature: no code generator.
#[cfg(not(feature = "native"))]
fn supported() -> bool {
    false
}

/// What native code the VMs of one worker hold right now, summed: each VM adds what it
/// compiles and maps, and takes it back when it ends. The live figures behind
/// `WorkerStats::native_*`.
#[derive(Debug, Default)]
pub(crate) struct NativeTally {
    modules: AtomicUsize,
    bytecode: AtomicUsize,
    code: AtomicUsize,
}

/// A reading of a [`NativeTally`], or of one VM.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct NativeUse {
    /// Chunks (module versions, scripts) handed to the code generator.
    pub(crate) modules: usize,
    /// Their bytecode, in bytes.
    pub(crate) bytecode: usize,
    /// Executable memory the code generators have mapped, in bytes.
    pub(crate) code: usize,
}

impl NativeTally {
    /// The figures now (each read on its own).
    pub(crate) fn read(&self) -> NativeUse {
        NativeUse {
            modules: self.modules.load(Ordering::Relaxed),
            bytecode: self.bytecode.load(Ordering::Relaxed),
            code: self.code.load(Ordering::Relaxed),
        }
    }

    fn add(&self, used: NativeUse) {
        self.modules.fetch_add(used.modules, Ordering::Relaxed);
        self.bytecode.fetch_add(used.bytecode, Ordering::Relaxed);
        self.code.fetch_add(used.code, Ordering::Relaxed);
    }

    fn remove(&self, used: NativeUse) {
        self.modules.fetch_sub(used.modules, Ordering::Relaxed);
        self.bytecode.fetch_sub(used.bytecode, Ordering::Relaxed);
        self.code.fetch_sub(used.code, Ordering::Relaxed);
    }
}

/// One VM's executable memory, as its code generator reports it to [`code_pages`], and the
/// tally it also counts in. Boxed in the VM's [`NativeSetting`]: the generator keeps its address
/// until the VM closes.
#[derive(Default)]
struct CodeMemory {
    mapped: Cell<usize>,
    tally: OnceCell<Arc<NativeTally>>,
}

#[cfg(feature = "native")]
impl CodeMemory {
    /// The generator unmapped `unmapped` bytes and mapped `mapped` (one of them is zero).
    fn moved(&self, unmapped: usize, mapped: usize) {
        let now = self.mapped.get();
        self.mapped
            .set(now.saturating_sub(unmapped).saturating_add(mapped));
        if let Some(tally) = self.tally.get() {
            tally.code.fetch_add(mapped, Ordering::Relaxed);
            tally.code.fetch_sub(unmapped.min(now), Ordering::Relaxed);
        }
    }
}

/// A VM's native-code setting and what it has handed the generator so far (its app data).
///
/// mlua drops a VM's app data after `lua_close`, which is where Luau destroys the code
/// generator and reports its last unmappings to [`code_pages`]: `code` outlives them.
struct NativeSetting {
    mode: NativeMode,
    /// Bytecode bytes compiled so far, against [`NATIVE_BYTECODE_PER_VM`].
    compiled: Cell<usize>,
    /// Chunks handed to the generator so far.
    modules: Cell<usize>,
    /// Whether the VM's code generator was made (on its first compile).
    generator_made: Cell<bool>,
    code: Box<CodeMemory>,
}

impl NativeSetting {
    fn used(&self) -> NativeUse {
        NativeUse {
            modules: self.modules.get(),
            bytecode: self.compiled.get(),
            code: self.code.mapped.get(),
        }
    }
}

impl Drop for NativeSetting {
    fn drop(&mut self) {
        // The generator's blocks were unmapped (and taken off the tally) in `lua_close`.
        if let Some(tally) = self.code.tally.get() {
            tally.remove(NativeUse {
                code: 0,
                ..self.used()
            });
        }
    }
}

/// Sets up a new VM: `mode` decides what it compiles. Its code generator waits for the first
/// compile.
pub(crate) fn install(lua: &Lua, mode: NativeMode) {
    lua.set_app_data(NativeSetting {
        mode,
        compiled: Cell::new(0),
        modules: Cell::new(0),
        generator_made: Cell::new(false),
        code: Box::default(),
    });
}

/// The native mode of the VM `lua` (off for a VM Skein did not build).
pub(crate) fn mode_of(lua: &Lua) -> NativeMode {
    lua.app_data_ref::<NativeSetting>()
        .map_or(NativeMode::Off, |s| s.mode)
}

/// Counts the VM `lua`'s native code in `tally` from now until the VM ends, what it holds
/// already included. A VM counts in one tally: a second call changes nothing.
pub(crate) fn report_to(lua: &Lua, tally: &Arc<NativeTally>) {
    if let Some(setting) = lua.app_data_ref::<NativeSetting>() {
        if setting.code.tally.set(tally.clone()).is_ok() {
            tally.add(setting.used());
        }
    }
}

/// What the VM `lua` holds in native code now.
pub(crate) fn used_by(lua: &Lua) -> NativeUse {
    lua.app_data_ref::<NativeSetting>()
        .map_or(NativeUse::default(), |s| s.used())
}

/// Compiles `function`, just loaded from `bytecode_len` bytes of bytecode that carry
/// `annotation`, to native code when the VM's mode asks for it, the platform has a code
/// generator and the VM's bound has room. Answers whether it was handed to the generator;
/// otherwise it runs interpreted, which is never an error.
pub(crate) fn compile_loaded(
    lua: &Lua,
    function: &Function,
    annotation: Annotation,
    bytecode_len: usize,
) -> bool {
    let Some(setting) = lua.app_data_ref::<NativeSetting>() else {
        return false;
    };
    let wanted = match setting.mode {
        NativeMode::Off => false,
        NativeMode::Annotated => annotation.asks_native(),
        NativeMode::All => true,
    };
    if !wanted || !supported() {
        return false;
    }
    let total = setting.compiled.get().saturating_add(bytecode_len);
    if total > NATIVE_BYTECODE_PER_VM {
        return false;
    }
    setting.compiled.set(total);
    setting.modules.set(setting.modules.get() + 1);
    if let Some(tally) = setting.code.tally.get() {
        tally.add(NativeUse {
            modules: 1,
            bytecode: bytecode_len,
            code: 0,
        });
    }
    let make_generator = !setting.generator_made.replace(true);
    let code: *const CodeMemory = &*setting.code;
    drop(setting);
    compile(lua, function, make_generator.then_some(code))
}

#[cfg(feature = "native")]
extern "C" {
    // src/vm/native_shim.cpp, built by build.rs.
    fn skein_codegen_create(
        state: *mut ffi::lua_State,
        block_size: usize,
        max_total_size: usize,
        on_pages: unsafe extern "C" fn(*mut c_void, *mut c_void, usize, *mut c_void, usize),
        context: *mut c_void,
    ) -> c_int;
    fn skein_codegen_compile(state: *mut ffi::lua_State, idx: c_int) -> c_int;
}

/// Luau's code allocator mapped (`new_size`) or unmapped (`old_size`) a block of a VM's
/// executable memory; `context` is that VM's [`CodeMemory`]. Called on the VM's thread, from
/// inside a compile or `lua_close`; it must not unwind, and does nothing that could.
#[cfg(feature = "native")]
unsafe extern "C" fn code_pages(
    context: *mut c_void,
    _old: *mut c_void,
    old_size: usize,
    _new: *mut c_void,
    new_size: usize,
) {
    // SAFETY: `context` is the `CodeMemory` boxed in the VM's `NativeSetting`, handed to
    // `skein_codegen_create` by `compile`; the box lives until the app data drops, after
    // `lua_close`, the last place the generator calls this.
    let memory = unsafe { &*context.cast::<CodeMemory>() };
    memory.moved(old_size, new_size);
}

/// Hands `function` to the code generator, making the VM's generator first when
/// `make_generator` names its [`CodeMemory`]; answers whether that went through.
#[cfg(feature = "native")]
fn compile(lua: &Lua, function: &Function, make_generator: Option<*const CodeMemory>) -> bool {
    let mut compiled = false;
    // SAFETY: `exec_raw` pushes `function` (a Luau function loaded from bytecode, which is
    // what the generator asserts) on a stack it restores afterwards. Neither shim call raises a
    // Lua error or lets a C++ exception out: `skein_codegen_create` fills the VM's execution
    // callbacks (once per VM: `generator_made`) with `code_pages` reporting to the VM's boxed
    // `CodeMemory`, and the compile reads the function's prototypes. A VM whose generator could
    // not be made (no memory for its first block) compiles nothing: Luau's compile answers "not
    // initialized" and the function runs interpreted.
    let ran = unsafe {
        lua.exec_raw::<()>(function, |state| {
            if let Some(code) = make_generator {
                skein_codegen_create(
                    state,
                    NATIVE_CODE_BLOCK,
                    NATIVE_CODE_PER_VM,
                    code_pages,
                    code.cast_mut().cast(),
                );
            }
            compiled = skein_codegen_compile(state, -1) != 0;
        })
    };
    ran.is_ok() && compiled
}

/// Built without the `native` feature: [`supported`] is false, so nothing gets here.
#[cfg(not(feature = "native"))]
fn compile(_lua: &Lua, _function: &Function, _make_generator: Option<*const CodeMemory>) -> bool {
    false
}

#[cfg(all(test, feature = "native"))]
mod tests {
    use mlua::chunk::ChunkMode;
    use mlua::Value;

    use super::super::{native_hint, source};
    use super::*;

    /// `text` compiled by Skein's compiler and loaded into `lua`, with its bytecode.
    fn load(lua: &Lua, text: &str) -> (Function, Vec<u8>) {
        let bytecode = source::compiler().compile(text).expect("compiles");
        let f = lua
            .load(&bytecode[..])
            .set_mode(ChunkMode::Binary)
            .into_function()
            .expect("loads");
        (f, bytecode)
    }

    /// A VM in `mode` and a loaded chunk of `text`, with its annotation and length.
    fn loaded(mode: NativeMode, text: &str) -> (Lua, Function, Annotation, usize) {
        let lua = Lua::new();
        install(&lua, mode);
        let (f, bytecode) = load(&lua, text);
        (lua, f, native_hint::annotation(&bytecode), bytecode.len())
    }

    fn compiled(lua: &Lua) -> usize {
        lua.app_data_ref::<NativeSetting>()
            .map_or(0, |s| s.compiled.get())
    }

    #[test]
    fn each_mode_hands_the_generator_what_it_names() {
        let plain =
            "local function f(n) local s = 0 for i = 1, n do s += i end return s end return f";
        let marked = "--!native\nlocal function f(n) local s = 0 for i = 1, n do s += i end return s end return f";
        let cases = [
            (NativeMode::Off, plain, false),
            (NativeMode::Off, marked, false),
            (NativeMode::Annotated, plain, false),
            (NativeMode::Annotated, marked, true),
            (NativeMode::All, plain, true),
            (NativeMode::All, marked, true),
        ];
        for (mode, text, wanted) in cases {
            let (lua, f, annotation, len) = loaded(mode, text);
            let handed = compile_loaded(&lua, &f, annotation, len);
            let expected = wanted && NativeMode::code_generator().is_some();
            assert_eq!(handed, expected, "{mode} {text}");
            assert_eq!(compiled(&lua), if expected { len } else { 0 });
            // Native or not, the chunk computes the same.
            let sum: Function = f.call(()).expect("runs");
            assert_eq!(sum.call::<f64>(100).expect("sums"), 5050.0);
        }
    }

    #[test]
    fn a_vm_hands_the_generator_at_most_its_bound_and_runs_the_rest_interpreted() {
        if NativeMode::code_generator().is_none() {
            return;
        }
        let (lua, f, annotation, len) = loaded(NativeMode::All, "return 1 + ...");
        // At the bound: exactly NATIVE_BYTECODE_PER_VM once this chunk is counted.
        lua.app_data_ref::<NativeSetting>()
            .expect("installed")
            .compiled
            .set(NATIVE_BYTECODE_PER_VM - len);
        assert!(compile_loaded(&lua, &f, annotation, len));
        assert_eq!(compiled(&lua), NATIVE_BYTECODE_PER_VM);
        // One byte past it: refused, counted as nothing, and the chunk still runs.
        let (g, _) = load(&lua, "return 2 + ...");
        assert!(!compile_loaded(&lua, &g, annotation, 1));
        assert_eq!(compiled(&lua), NATIVE_BYTECODE_PER_VM);
        assert_eq!(g.call::<f64>(1).expect("runs interpreted"), 3.0);
    }

    /// Loads `text` into `lua` and hands it to the generator as a chunk asking for native code.
    fn load_native(lua: &Lua, text: &str) -> (Function, bool) {
        let (f, bytecode) = load(lua, text);
        let handed = compile_loaded(lua, &f, Annotation::Module, bytecode.len());
        (f, handed)
    }

    /// Whether `f(inNative)` (a loop, then a call of the probe it is given) runs as native
    /// code: the probe asks Luau whether a frame below it runs native. (Handed as an argument:
    /// a global read in a VM without Luau's safe environment sends native code back to the
    /// interpreter.)
    fn runs_native(lua: &Lua, f: &Function) -> bool {
        let probe = lua
            .create_function(|lua, ()| {
                // SAFETY: `exec_raw` hands the running state; the query reads call frames only.
                unsafe {
                    lua.exec_raw::<bool>((), |state| {
                        let any = (0..4).any(|level| ffi::lua_incustomexecution(state, level) != 0);
                        ffi::lua_pushboolean(state, c_int::from(any));
                    })
                }
            })
            .expect("probe");
        let (native, _): (bool, Value) = f.call(probe).expect("runs");
        native
    }

    #[test]
    fn a_vm_maps_executable_memory_only_when_it_first_compiles_and_reports_it_to_its_tally() {
        if NativeMode::code_generator().is_none() {
            return;
        }
        let tally = Arc::new(NativeTally::default());
        let lua = Lua::new();
        install(&lua, NativeMode::All);
        report_to(&lua, &tally);
        assert_eq!(used_by(&lua), NativeUse::default(), "no generator yet");
        let kernel = "local function f(inNative) local s = 0 for i = 1, 10 do s += i end return inNative(), s end return f";
        let (f, handed) = load_native(&lua, kernel);
        assert!(handed);
        let len = source::compiler().compile(kernel).expect("compiles").len();
        let one = NativeUse {
            modules: 1,
            bytecode: len,
            code: NATIVE_CODE_BLOCK,
        };
        assert_eq!(
            used_by(&lua),
            one,
            "the first block holds the gate and the module"
        );
        assert_eq!(tally.read(), one);
        let g: Function = f.call(()).expect("runs");
        assert!(runs_native(&lua, &g));
        // A second VM on the same tally adds to it; each VM ending takes its share back,
        // executable memory included (Luau unmaps it in `lua_close`).
        let other = Lua::new();
        install(&other, NativeMode::All);
        let _ = load_native(&other, kernel);
        report_to(&other, &tally);
        report_to(&other, &tally);
        assert_eq!(
            tally.read(),
            NativeUse {
                modules: 2,
                bytecode: 2 * len,
                code: 2 * NATIVE_CODE_BLOCK,
            },
            "a VM reported twice counts once, with what it held before"
        );
        drop((f, g, lua));
        assert_eq!(tally.read(), one);
        drop(other);
        assert_eq!(tally.read(), NativeUse::default());
    }

    #[test]
    fn a_vm_that_compiles_nothing_maps_nothing() {
        let tally = Arc::new(NativeTally::default());
        for (mode, text) in [
            (
                NativeMode::Off,
                "--!native\nreturn function() for i = 1, 3 do end end",
            ),
            (
                NativeMode::Annotated,
                "return function() for i = 1, 3 do end end",
            ),
        ] {
            let (lua, f, annotation, len) = loaded(mode, text);
            report_to(&lua, &tally);
            assert!(!compile_loaded(&lua, &f, annotation, len));
            assert_eq!(used_by(&lua), NativeUse::default(), "{mode}");
            assert_eq!(tally.read(), NativeUse::default(), "{mode}");
            assert!(!lua
                .app_data_ref::<NativeSetting>()
                .expect("installed")
                .generator_made
                .get());
        }
    }

    #[test]
    fn many_small_native_modules_fill_the_code_bound_and_the_next_runs_interpreted() {
        if NativeMode::code_generator().is_none() {
            return;
        }
        let lua = Lua::new();
        install(&lua, NativeMode::All);
        // Luau starts each module's code on a fresh page, so thousands of small modules reach
        // the bound on executable memory long before the bound on bytecode.
        let mut modules = 0;
        let mut last_native = None;
        while used_by(&lua).code < NATIVE_CODE_PER_VM {
            let text = format!(
                "return function(inNative) local s = {modules} for i = 1, 3 do s += i end return inNative(), s end"
            );
            let (f, handed) = load_native(&lua, &text);
            assert!(handed, "module {modules}: under the bytecode bound");
            last_native = Some(f.call::<Function>(()).expect("runs"));
            modules += 1;
            assert!(modules < 20_000, "the code bound was never reached");
        }
        assert_eq!(
            used_by(&lua).code,
            NATIVE_CODE_PER_VM,
            "at the bound, never past it"
        );
        assert!(used_by(&lua).bytecode < NATIVE_BYTECODE_PER_VM);
        let last_native = last_native.expect("compiled");
        assert!(
            runs_native(&lua, &last_native),
            "the module that took the last block is native"
        );
        // Past the bound: modules are still handed to the generator (the bytecode bound has
        // room), Luau refuses them a block, and they run interpreted and right.
        let mut past = None;
        for n in 0..2_000 {
            let text = format!(
                "return function(inNative) local s = {n} for i = 1, 3 do s += i end return inNative(), s end"
            );
            let (f, _) = load_native(&lua, &text);
            past = Some((n, f.call::<Function>(()).expect("runs")));
        }
        let (n, past) = past.expect("loaded");
        assert_eq!(used_by(&lua).code, NATIVE_CODE_PER_VM);
        assert!(
            !runs_native(&lua, &past),
            "past the bound the module runs interpreted"
        );
        let no_probe = lua.create_function(|_, ()| Ok(false)).expect("stub");
        let (_, sum): (bool, f64) = past.call(no_probe).expect("runs");
        assert_eq!(sum, f64::from(n) + 6.0);
    }

    #[test]
    fn a_vm_skein_did_not_set_up_compiles_nothing() {
        let lua = Lua::new();
        let f = lua.load("return 1").into_function().expect("loads");
        assert!(!compile_loaded(&lua, &f, Annotation::Module, 10));
        assert_eq!(mode_of(&lua), NativeMode::Off);
    }

    #[test]
    fn in_use_names_the_mode_and_the_generator() {
        assert_eq!(NativeMode::Off.in_use(), "interpreter (native code off)");
        match NativeMode::code_generator() {
            Some(arch) => {
                assert_eq!(arch, std::env::consts::ARCH);
                assert_eq!(
                    NativeMode::Annotated.in_use(),
                    format!("native: annotated ({arch} code generator)")
                );
                assert_eq!(
                    NativeMode::All.in_use(),
                    format!("native: all ({arch} code generator)")
                );
            }
            None => assert_eq!(
                NativeMode::All.in_use(),
                "interpreter (no code generator on this platform)"
            ),
        }
    }
}
