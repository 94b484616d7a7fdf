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
//! Luau's code allocator (`CodeAllocator.cpp`) gives each VM its own executable blocks of
//! 4 MiB (`LuauCodeGenBlockSize`), reserved as needed (the first when the generator is made, for
//! its entry gate), at most 256 MiB of them per VM (`LuauCodeGenMaxTotalSize`); past that a
//! chunk's compile fails and it runs interpreted. Freed code is not reused within a VM, so a VM
//! that reloads native modules again and again grows towards that bound until it is retired.
//! Neither number can be set through Luau's C API (`luau_setfflag` sets only boolean flags), so
//! Skein bounds what it hands the generator instead: see [`NATIVE_BYTECODE_PER_VM`].

use std::cell::Cell;
use std::fmt;
#[cfg(feature = "native")]
use std::sync::OnceLock;

#[cfg(feature = "native")]
use mlua::ffi;
use mlua::{Function, Lua};

use super::native_hint::Annotation;

/// The most bytecode (in bytes) one VM hands to the code generator over its life: 4 MiB. The
/// machine code Luau makes of it is a small multiple of it, so this keeps each VM well inside
/// Luau's own bound of 256 MiB of code. A chunk that would pass it runs interpreted.
pub(crate) const NATIVE_BYTECODE_PER_VM: usize = 4 << 20;

/// Which Luau code a VM compiles to native machine code.
///
/// Native code runs numeric loops several times faster than Luau's interpreter (the Mandelbrot
/// kernel of `examples/mandelbrot/rows.luau` about 3x, see `docs/performance.md`); deadlines,
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

/// A VM's native-code setting and what it has handed the generator so far (its app data).
struct NativeSetting {
    mode: NativeMode,
    /// Bytecode bytes compiled so far, against [`NATIVE_BYTECODE_PER_VM`].
    compiled: Cell<usize>,
    /// Whether the VM's code generator was made (on its first compile).
    generator_made: Cell<bool>,
}

/// Sets up a new VM: `mode` decides what it compiles. Its code generator waits for the first
/// compile.
pub(crate) fn install(lua: &Lua, mode: NativeMode) {
    lua.set_app_data(NativeSetting {
        mode,
        compiled: Cell::new(0),
        generator_made: Cell::new(false),
    });
}

/// The native mode of the VM `lua` (off for a VM Skein did not build).
pub(crate) fn mode_of(lua: &Lua) -> NativeMode {
    lua.app_data_ref::<NativeSetting>()
        .map_or(NativeMode::Off, |s| s.mode)
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
    let make_generator = !setting.generator_made.replace(true);
    drop(setting);
    compile(lua, function, make_generator)
}

/// Hands `function` to the code generator, making the VM's generator first when
/// `make_generator`; answers whether that went through.
#[cfg(feature = "native")]
fn compile(lua: &Lua, function: &Function, make_generator: bool) -> bool {
    // SAFETY: `exec_raw` pushes `function` (a Luau function loaded from bytecode, which is
    // what `luau_codegen_compile` asserts) on a stack it restores afterwards. Neither call raises
    // a Lua error: `luau_codegen_create` fills the VM's execution callbacks (once per VM:
    // `generator_made`), and the generator reads the function's prototypes. A VM whose
    // generator could not be made (no memory for its first block) compiles nothing: Luau's
    // compile answers "not initialized" and the function runs interpreted.
    let compiled = unsafe {
        lua.exec_raw::<()>(function, |state| {
            if make_generator {
                ffi::luau_codegen_create(state);
            }
            ffi::luau_codegen_compile(state, -1);
        })
    };
    compiled.is_ok()
}

/// Built without the `native` feature: [`supported`] is false, so nothing gets here.
#[cfg(not(feature = "native"))]
fn compile(_lua: &Lua, _function: &Function, _make_generator: bool) -> bool {
    false
}

#[cfg(all(test, feature = "native"))]
mod tests {
    use mlua::chunk::ChunkMode;

    use super::super::{native_hint, source};
    use super::*;

    /// A VM in `mode` and a loaded chunk of `text`, with its annotation and length.
    fn loaded(mode: NativeMode, text: &str) -> (Lua, Function, Annotation, usize) {
        let lua = Lua::new();
        install(&lua, mode);
        let bytecode = source::compiler().compile(text).expect("compiles");
        let f = lua
            .load(&bytecode[..])
            .set_mode(ChunkMode::Binary)
            .into_function()
            .expect("loads");
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
        let bytecode = source::compiler()
            .compile("return 2 + ...")
            .expect("compiles");
        let g = lua
            .load(&bytecode[..])
            .set_mode(ChunkMode::Binary)
            .into_function()
            .expect("loads");
        assert!(!compile_loaded(&lua, &g, annotation, 1));
        assert_eq!(compiled(&lua), NATIVE_BYTECODE_PER_VM);
        assert_eq!(g.call::<f64>(1).expect("runs interpreted"), 3.0);
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
