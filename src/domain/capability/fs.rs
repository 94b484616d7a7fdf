//! `@skein/fs`: file access for scripts, guarded by `filesystem.read` / `filesystem.write` and
//! the roots the grant scopes them to.
//!
//! It is a library module in every VM: what it may touch comes from the authority of the task
//! that calls it, so a host opens it by granting roots ([`Grant::read_root`]), and the runner
//! does the same from its `--allow-read` / `--allow-write` flags. Relative paths resolve from
//! the process's current directory. Every path is made canonical before its scope is checked
//! (symlinks and `..` resolved), so a link out of a root does not lead out of it.
//!
//! [`Grant::read_root`]: crate::Grant::read_root

use std::path::{Component, Path, PathBuf};

use mlua::{Lua, Table, Value};

use super::authority::require_path;

/// Registry key of the module table `require("@skein/fs")` answers.
pub(crate) const FS_KEY: &str = "skein.fs";

/// Builds the module table and keeps it in the registry.
pub(crate) fn install(lua: &Lua) -> mlua::Result<()> {
    let fs = lua.create_table()?;
    fs.raw_set("readFile", lua.create_function(read_file)?)?;
    fs.raw_set("writeFile", lua.create_function(write_file)?)?;
    fs.raw_set("list", lua.create_function(list)?)?;
    fs.set_readonly(true);
    lua.set_named_registry_value(FS_KEY, fs)
}

/// The module table.
pub(crate) fn module(lua: &Lua) -> mlua::Result<Table> {
    lua.named_registry_value(FS_KEY)
}

fn path_arg(func: &str, value: Value) -> mlua::Result<String> {
    match value {
        Value::String(s) => Ok(s.to_str()?.to_owned()),
        other => Err(mlua::Error::runtime(format!(
            "fs.{func}: path must be a string, got {}",
            crate::vm::a_type(&other)
        ))),
    }
}

fn io_error(func: &str, path: &str, e: std::io::Error) -> mlua::Error {
    mlua::Error::runtime(format!("fs.{func}: '{path}': {e}"))
}

/// `path` made absolute against the current directory, with `.` and `..` resolved by name.
fn lexical(path: &Path) -> PathBuf {
    let base = if path.is_absolute() {
        PathBuf::new()
    } else {
        std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"))
    };
    let mut out = base;
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// The canonical path of an existing `path`, or its lexical form when it does not exist (so a
/// missing file outside every root is denied, not reported missing).
fn resolve(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| lexical(path))
}

/// Where a write lands: the canonical file when it exists, else its canonical folder joined
/// with its name.
fn resolve_for_write(path: &Path) -> PathBuf {
    if let Ok(p) = std::fs::canonicalize(path) {
        return p;
    }
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => {
            let parent = if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            };
            resolve(parent).join(name)
        }
        _ => lexical(path),
    }
}

fn read_file(lua: &Lua, path: Value) -> mlua::Result<mlua::LuaString> {
    let path = path_arg("readFile", path)?;
    let resolved = resolve(Path::new(&path));
    require_path(false, &resolved)?;
    let bytes = std::fs::read(&resolved).map_err(|e| io_error("readFile", &path, e))?;
    lua.create_string(bytes)
}

fn write_file(_: &Lua, (path, data): (Value, Value)) -> mlua::Result<()> {
    let path = path_arg("writeFile", path)?;
    let bytes = match data {
        Value::String(s) => s.as_bytes().to_vec(),
        Value::Buffer(b) => b.to_vec(),
        other => {
            return Err(mlua::Error::runtime(format!(
                "fs.writeFile: data for '{path}' must be a string or a buffer, got {}",
                crate::vm::a_type(&other)
            )))
        }
    };
    let resolved = resolve_for_write(Path::new(&path));
    require_path(true, &resolved)?;
    std::fs::write(&resolved, bytes).map_err(|e| io_error("writeFile", &path, e))
}

fn list(lua: &Lua, dir: Value) -> mlua::Result<Table> {
    let dir = path_arg("list", dir)?;
    let resolved = resolve(Path::new(&dir));
    require_path(false, &resolved)?;
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&resolved).map_err(|e| io_error("list", &dir, e))? {
        let entry = entry.map_err(|e| io_error("list", &dir, e))?;
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    lua.create_sequence_from(names)
}

#[cfg(test)]
mod tests {
    use super::lexical;
    use std::path::Path;

    #[test]
    fn lexical_resolves_dots_by_name() {
        assert_eq!(lexical(Path::new("/a/b/../c/./d")), Path::new("/a/c/d"));
        assert_eq!(lexical(Path::new("/a/../../x")), Path::new("/x"));
    }
}
