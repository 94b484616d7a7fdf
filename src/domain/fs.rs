//! `@skein/fs`: file access for scripts, guarded by `filesystem.read` / `filesystem.write` and
//! the roots the grant scopes them to.
//!
//! It is a library module in every VM: what it may touch comes from the authority of the task
//! that calls it, so a host opens it by granting roots ([`Grant::read_root`]), and the runner
//! does the same from its `--allow-read` / `--allow-write` flags. Relative paths resolve from
//! the process's current directory, or from the working folder of the calling task's grant
//! when it has one (a resource's folder, [`ResourceHost`]).
//!
//! # Confinement
//!
//! A path is never opened by name. It is made absolute and `..` is taken off by name
//! ([`resolve_path`]), which picks the granted root it lies below and the path beneath that
//! root ([`require_path`], a denial when there is none); then the path beneath is opened through
//! the root's directory handle, held by the grant since it was made, with `cap-std`, which
//! resolves it component by component beneath the handle (`openat2` with `RESOLVE_BENEATH` on
//! Linux) and refuses any symbolic link that leads out of the root, at the time of the open. So
//! a link out, a dangling link out (on write), or a directory swapped for a link while the call
//! runs, all end in a refusal ([`deny_escape`]), never in a file outside.
//!
//! [`Grant::read_root`]: crate::capability::Grant::read_root
//! [`ResourceHost`]: crate::resource::ResourceHost

use std::io::{self, Read};
use std::path::Path;

use cap_std::fs::{Dir, OpenOptions};
use mlua::{Lua, Table, Value};

use crate::principal::capability::{deny_escape, require_path, resolve_path, CapabilityError};
use crate::vm::{a_type, source_written};

/// Registry key of the module table `require("@skein/fs")` answers.
pub(crate) const FS_KEY: &str = "skein.fs";

/// The largest file `readFile` returns: 64 MiB. A larger file is refused before it is read,
/// so a script cannot make the host allocate more than this for one call.
pub(crate) const MAX_READ_BYTES: u64 = 64 * 1024 * 1024;

/// The most names `list` returns: 65,536. A directory with more is refused once the next name is
/// seen, so the host holds at most this many names (each at most a file-name long) for one call.
pub(crate) const MAX_LIST_ENTRIES: usize = 65_536;

/// The module table, built on first use in each VM and kept in its registry.
pub(crate) fn module(lua: &Lua) -> mlua::Result<Value> {
    let cached: Value = lua.named_registry_value(FS_KEY)?;
    if !cached.is_nil() {
        return Ok(cached);
    }
    let fs = lua.create_table()?;
    fs.raw_set("readFile", lua.create_function(read_file)?)?;
    fs.raw_set("writeFile", lua.create_function(write_file)?)?;
    fs.raw_set("list", lua.create_function(list)?)?;
    fs.set_readonly(true);
    lua.set_named_registry_value(FS_KEY, &fs)?;
    Ok(Value::Table(fs))
}

/// The longest path a call takes, in bytes: Linux's `PATH_MAX`. A longer one names no file,
/// and is refused before any text quotes it.
pub(crate) const MAX_PATH_BYTES: usize = 4096;

/// The path argument `param` of `func`.
fn path_arg(func: &str, param: &str, value: Value) -> mlua::Result<String> {
    let refuse = |why: String| mlua::Error::runtime(format!("fs.{func}: {param} must be {why}"));
    match value {
        Value::String(s) => {
            let bytes = s.as_bytes();
            if bytes.len() > MAX_PATH_BYTES {
                return Err(refuse(format!(
                    "at most {MAX_PATH_BYTES} bytes, got a string of {} bytes",
                    bytes.len()
                )));
            }
            match std::str::from_utf8(&bytes) {
                Ok(text) => Ok(text.to_owned()),
                Err(_) => Err(refuse("UTF-8 text".to_owned())),
            }
        }
        other => Err(refuse(format!("a string, got {}", a_type(&other)))),
    }
}

/// The error a script sees: the function, the path as the script gave it, and why.
fn failed(func: &str, path: &str, why: impl std::fmt::Display) -> mlua::Error {
    mlua::Error::runtime(format!("fs.{func}: '{path}': {why}"))
}

/// A refusal that is not the file system's own error (a bound, a kind of file).
fn refused(why: String) -> io::Error {
    io::Error::other(why)
}

/// cap-std reports a path that leads out of its directory as `PermissionDenied` with a message
/// of its own; the operating system's `EACCES` carries an OS error code instead.
fn is_escape(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::PermissionDenied && e.raw_os_error().is_none()
}

/// Runs `op` on the script's `path` beneath the granted root it lies below: checks the
/// capability and the root (a denial when it is outside every root), then opens beneath each
/// root it lies below, deepest first, until one does not lead out of its root (a denial naming
/// them when every one does).
fn beneath<T>(
    func: &str,
    path: &str,
    write: bool,
    op: impl Fn(&Dir, &Path) -> io::Result<T>,
) -> mlua::Result<T> {
    let absolute = resolve_path(Path::new(path))
        .map_err(|e| failed(func, path, format!("the current directory is unknown: {e}")))?;
    let below = require_path(write, &absolute).map_err(|e| failed(func, path, e))?;
    let mut escaped = Vec::new();
    for (root, rel) in below {
        let rel = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            &rel
        };
        match op(root.dir(), rel) {
            Ok(v) => return Ok(v),
            Err(e) if is_escape(&e) => escaped.push(root.path().to_owned()),
            Err(e) => return Err(failed(func, path, e)),
        }
    }
    let denied: CapabilityError = deny_escape(write, &absolute, escaped);
    Err(failed(func, path, denied))
}

fn read_file(lua: &Lua, path: Value) -> mlua::Result<mlua::LuaString> {
    let path = path_arg("readFile", "path", path)?;
    let bytes = beneath("readFile", &path, false, |dir, rel| {
        // Looked at before the open, so a FIFO or device is refused, not opened (which could
        // block); the opened file's own metadata is what the bound is checked on.
        if !dir.metadata(rel)?.is_file() {
            return Err(refused("not a regular file".to_owned()));
        }
        let file = dir.open(rel)?;
        let size = file.metadata()?.len();
        if size > MAX_READ_BYTES {
            return Err(too_large(size));
        }
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        // One byte past the bound, in case the file grew since its size was read.
        file.take(MAX_READ_BYTES + 1).read_to_end(&mut bytes)?;
        if bytes.len() as u64 > MAX_READ_BYTES {
            return Err(too_large(bytes.len() as u64));
        }
        Ok(bytes)
    })?;
    lua.create_string(bytes)
}

fn too_large(size: u64) -> io::Error {
    refused(format!(
        "the file is {size} bytes, more than the {MAX_READ_BYTES} bytes (64 MiB) readFile returns"
    ))
}

fn write_file(_: &Lua, (path, data): (Value, Value)) -> mlua::Result<()> {
    let path = path_arg("writeFile", "path", path)?;
    let bytes = match &data {
        Value::String(s) => s.as_bytes().to_vec(),
        Value::Buffer(b) => b.to_vec(),
        other => {
            return Err(mlua::Error::runtime(format!(
                "fs.writeFile: data for '{path}' must be a string or a buffer, got {}",
                a_type(other)
            )))
        }
    };
    beneath("writeFile", &path, true, |dir, rel| {
        // An existing target that is not a file is refused before it is opened (a FIFO would
        // block the open); a missing one is created. The open itself follows a final link only
        // while it stays beneath the root, so a dangling link out is refused, not created.
        match dir.metadata(rel) {
            Ok(meta) if !meta.is_file() => {
                return Err(refused("not a regular file".to_owned()));
            }
            Err(e) if is_escape(&e) => return Err(e),
            _ => {}
        }
        let mut options = OpenOptions::new();
        options.write(true).create(true).truncate(true);
        let mut file = dir.open_with(rel, &options)?;
        io::Write::write_all(&mut file, &bytes)
    })?;
    // The file may be a module: dispatches made from now on run its new text.
    if let Ok(absolute) = resolve_path(Path::new(&path)) {
        source_written(&absolute);
    }
    Ok(())
}

fn list(lua: &Lua, dir: Value) -> mlua::Result<Table> {
    let path = path_arg("list", "dir", dir)?;
    let names = beneath("list", &path, false, |dir, rel| {
        let mut names = Vec::new();
        for entry in dir.read_dir(rel)? {
            if names.len() == MAX_LIST_ENTRIES {
                return Err(refused(format!(
                    "the directory has more than {MAX_LIST_ENTRIES} entries, the most list returns"
                )));
            }
            names.push(entry?.file_name().to_string_lossy().into_owned());
        }
        Ok(names)
    })?;
    let mut names = names;
    names.sort();
    lua.create_sequence_from(names)
}
