//! `print` that keeps every line: each call writes its whole line to stdout at once.
//!
//! Luau's own `print` writes through C's `stdout`, which is block-buffered when stdout is a pipe
//! or a file: lines sit in a buffer until it fills or the process exits normally, and a run
//! killed (by a signal, a timeout, an abort) loses them. This `print` builds the line and hands
//! it to the OS with one locked write and a flush, so nothing is ever held in the process: a
//! kill, even `SIGKILL`, loses no line already printed, and there is nothing left to flush on
//! `SIGINT`/`SIGTERM` or before an abort. The lock also keeps lines printed by different
//! workers from interleaving.

use std::io::Write;

use mlua::{Function, Lua, MultiValue};

/// Replaces the global `print` of `lua` (run as a plan setup step, before the sandbox closes
/// the globals, in every VM of the domain).
pub(crate) fn install(lua: &Lua) -> mlua::Result<()> {
    let globals = lua.globals();
    // `tostring` as the VM has it now: the same conversion Luau's `print` makes (`__tostring`,
    // `__name`), and one a script can't swap later, as the sandbox makes globals read-only.
    let tostring: Function = globals.raw_get("tostring")?;
    let print = lua.create_function(move |_, args: MultiValue| {
        let mut line = Vec::new();
        for (at, arg) in args.into_iter().enumerate() {
            if at > 0 {
                line.push(b'\t');
            }
            let text: mlua::LuaString = tostring.call(arg)?;
            line.extend_from_slice(&text.as_bytes());
        }
        line.push(b'\n');
        let mut out = std::io::stdout().lock();
        // As Luau's `print` does, a line that can't be written (stdout closed) is dropped
        // rather than failing the script.
        let _ = out.write_all(&line).and_then(|()| out.flush());
        Ok(())
    })?;
    globals.raw_set("print", print)
}
