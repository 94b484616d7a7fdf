//! The `runner` global: what only a script started by `skein run` may do beyond the sandbox.
//!
//! Skein's VMs are sandboxed and never touch the file system; a command-line script still wants
//! to leave a result behind (an image, a report). The runner installs this table in the engine
//! VM of its one domain, never in worker VMs, so jobs stay pure and only the script that the
//! person started writes files, and only below the directory they started it from.

use std::path::{Component, Path};

use mlua::{Lua, Value};

/// Installs `runner = { writeFile = ..., args = { ... } }` as a global of `lua` (the engine VM).
pub(crate) fn install(lua: &Lua, script_args: &[String]) -> mlua::Result<()> {
    let runner = lua.create_table()?;
    runner.set(
        "writeFile",
        lua.create_function(|_, (path, data): (Value, Value)| write_file(path, data))?,
    )?;
    runner.set(
        "args",
        lua.create_sequence_from(script_args.iter().cloned())?,
    )?;
    lua.globals().set("runner", runner)
}

/// `runner.writeFile(path, data)`: writes a string's or a buffer's bytes to `path`, relative to
/// the current directory, replacing the file. Parent folders must exist.
fn write_file(path: Value, data: Value) -> mlua::Result<()> {
    let path = match path {
        Value::String(s) => s.to_str()?.to_owned(),
        other => {
            return Err(mlua::Error::runtime(format!(
                "runner.writeFile: path must be a string, got {}",
                other.type_name()
            )))
        }
    };
    check_relative(&path).map_err(mlua::Error::runtime)?;
    let bytes = match data {
        Value::String(s) => s.as_bytes().to_vec(),
        Value::Buffer(b) => b.to_vec(),
        other => {
            return Err(mlua::Error::runtime(format!(
                "runner.writeFile: data for '{path}' must be a string or a buffer, got {}",
                other.type_name()
            )))
        }
    };
    std::fs::write(&path, bytes)
        .map_err(|e| mlua::Error::runtime(format!("runner.writeFile: '{path}': {e}")))
}

/// Refuses a path that could leave the current directory: absolute (or rooted, or with a drive
/// prefix) paths and any `..` component.
fn check_relative(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("runner.writeFile: the path is empty".to_owned());
    }
    let p = Path::new(path);
    if p.is_absolute() || p.has_root() {
        return Err(format!(
            "runner.writeFile: '{path}' is absolute: a script writes only below the current directory"
        ));
    }
    for component in p.components() {
        match component {
            Component::ParentDir => {
                return Err(format!(
                    "runner.writeFile: '{path}' has a '..' component: a script writes only below the current directory"
                ))
            }
            Component::Prefix(_) | Component::RootDir => {
                return Err(format!(
                    "runner.writeFile: '{path}' is absolute: a script writes only below the current directory"
                ))
            }
            Component::CurDir | Component::Normal(_) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_relative;

    #[test]
    fn relative_paths_pass_and_escaping_ones_are_refused_by_name() {
        assert!(check_relative("out.png").is_ok());
        assert!(check_relative("./images/out.png").is_ok());
        assert!(check_relative("a..b/c").is_ok());
        let abs = check_relative("/tmp/x").unwrap_err();
        assert_eq!(
            abs,
            "runner.writeFile: '/tmp/x' is absolute: a script writes only below the current directory"
        );
        let up = check_relative("images/../../x").unwrap_err();
        assert_eq!(
            up,
            "runner.writeFile: 'images/../../x' has a '..' component: a script writes only below the current directory"
        );
        assert_eq!(
            check_relative("").unwrap_err(),
            "runner.writeFile: the path is empty"
        );
    }
}
