//! Luau that ships inside Skein (the prelude, the waiting halves of `pop`, `receive` and `join`,
//! service stubs...): each source sits in a `.luau` file beside the Rust that runs it, and is
//! compiled once per process, however many VMs load it.
//!
//! Compiling a chunk for every VM would cost a third of a cold VM (the prelude alone), so the
//! bytecode is kept; it comes from the same check and compiler as a script's text
//! ([`source`]), so Skein's own chunks take no other road into Luau's loader.
//! This file never names what the chunks do: each site keeps its own `static`.

use std::sync::OnceLock;

use mlua::chunk::ChunkMode;
use mlua::{Function, Lua, Value};

use super::source;

/// One embedded Luau chunk: its chunk name, its source (`include_str!` of a `.luau` file) and
/// its bytecode once compiled.
///
/// A chunk name starting with `=skein` marks Skein's own code: `require` looks past it for the
/// script that called ([`with_caller_source`](super::with_caller_source)).
pub(crate) struct Embedded {
    name: &'static str,
    source: &'static str,
    /// The bytecode, or why the source did not compile (a bug in Skein, reported as an error
    /// rather than a panic, since a script's call may be the first to load it).
    bytecode: OnceLock<Result<Vec<u8>, String>>,
}

impl Embedded {
    /// A chunk named `name` (`=skein ...`) with `source`, compiled on first load.
    pub(crate) const fn new(name: &'static str, source: &'static str) -> Embedded {
        Embedded {
            name,
            source,
            bytecode: OnceLock::new(),
        }
    }

    /// The chunk as a function of `lua`, compiled on the first load in the process.
    ///
    /// # Errors
    /// The VM's error loading the bytecode (out of memory), or the compiler's text if the
    /// source does not compile.
    pub(crate) fn load(&self, lua: &Lua) -> mlua::Result<Function> {
        let bytecode = self
            .bytecode
            .get_or_init(|| compile(self.name, self.source))
            .as_ref()
            .map_err(|why| mlua::Error::runtime(why.clone()))?;
        lua.load(&bytecode[..])
            .set_name(self.name)
            .set_mode(ChunkMode::Binary)
            .into_function()
    }

    /// [`load`](Self::load) once per VM: the function is kept in the VM's registry under `key`
    /// and answered from there on later calls, for a chunk that is itself the function a site
    /// calls again and again (a runner, a call wrapper).
    ///
    /// # Errors
    /// As [`load`](Self::load), or the VM's error reading or writing its registry.
    pub(crate) fn load_kept(&self, lua: &Lua, key: &str) -> mlua::Result<Function> {
        if let Value::Function(f) = lua.named_registry_value::<Value>(key)? {
            return Ok(f);
        }
        let f = self.load(lua)?;
        lua.set_named_registry_value(key, f.clone())?;
        Ok(f)
    }
}

/// Compiles an embedded source as a script's text is compiled.
fn compile(name: &str, text: &str) -> Result<Vec<u8>, String> {
    source::check(text.as_bytes()).map_err(|refusal| refusal.message(name))?;
    source::compiler()
        .compile(text)
        .map_err(|e| format!("Skein's chunk '{name}' does not compile: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    static ANSWER: Embedded = Embedded::new("=skein test", "local x = ... return x + 1");
    static BROKEN: Embedded = Embedded::new("=skein broken", "return +");

    #[test]
    fn a_chunk_compiles_once_and_loads_into_each_vm() {
        for _ in 0..2 {
            let lua = Lua::new();
            let f = ANSWER.load(&lua).unwrap();
            assert_eq!(f.call::<i64>(41).unwrap(), 42);
        }
        assert!(matches!(ANSWER.bytecode.get(), Some(Ok(_))));
    }

    #[test]
    fn a_chunk_that_does_not_compile_is_an_error_every_time() {
        let lua = Lua::new();
        for _ in 0..2 {
            let err = BROKEN.load(&lua).unwrap_err();
            assert!(
                super::super::error_message(&err)
                    .starts_with("Skein's chunk '=skein broken' does not compile"),
                "{err}"
            );
        }
    }
}
