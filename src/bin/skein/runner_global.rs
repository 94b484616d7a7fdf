//! The `runner` global: what only a script started by `skein run` sees beyond the library.
//!
//! Today that is its command-line arguments. Files go through `@skein/fs`, under the
//! capabilities the `--allow-*` flags grant, so the runner has no way out of the sandbox of its
//! own.

use mlua::Lua;

/// Installs `runner = { args = { ... } }` as a global of `lua` (the engine VM); each argument is
/// a Luau string of its bytes.
pub(crate) fn install(lua: &Lua, script_args: &[&[u8]]) -> mlua::Result<()> {
    let runner = lua.create_table()?;
    let args = script_args
        .iter()
        .map(|a| lua.create_string(a))
        .collect::<mlua::Result<Vec<_>>>()?;
    runner.set("args", lua.create_sequence_from(args)?)?;
    lua.globals().set("runner", runner)
}
