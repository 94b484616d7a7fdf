//! The one error type of the module loader: every way a `require` can fail, each with the
//! structured fields a caller needs and a single-line `Display` a user can grep for.

use std::fmt;
use std::path::{Path, PathBuf};

/// Why a `require` failed.
///
/// Resolution errors (`BadSpecifier`, `NotFound`, `Directory`, `NotRegular`, `Ambiguous`,
/// `UnknownAlias`, `BadConfig`, `LeadsOutside`) name the specifier and the requiring file;
/// loading errors (`Cycle`, `TooDeep`, `Compile`, `Io`, `BadReturn`, `Runtime`) name the module
/// file.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub(crate) enum RequireError {
    /// The specifier is not of a form require-by-string accepts.
    BadSpecifier { spec: String, reason: &'static str },
    /// The specifier is longer than [`MAX_SPEC_BYTES`]: `head` is its start, `len` its length.
    TooLong { head: String, len: usize },
    /// No module (and, for an intermediate component, no folder) exists at `at`.
    NotFound {
        spec: String,
        caller: PathBuf,
        at: PathBuf,
        intermediate: bool,
    },
    /// The module path names a folder with no `init.luau` or `init.lua`: no module file.
    Directory {
        spec: String,
        caller: PathBuf,
        at: PathBuf,
    },
    /// The one file at the module path is not a regular file (`kind` says what it is, with its
    /// article): it is never opened, since opening a FIFO blocks until a writer comes.
    NotRegular {
        spec: String,
        caller: PathBuf,
        file: PathBuf,
        kind: &'static str,
    },
    /// Two files could each be the module at one path.
    Ambiguous {
        spec: String,
        caller: PathBuf,
        first: PathBuf,
        second: PathBuf,
    },
    /// No `.luaurc` above the requiring file defines the alias.
    UnknownAlias {
        alias: String,
        spec: String,
        caller: PathBuf,
    },
    /// A `.luaurc` could not be read as a configuration, or its aliases refer to each other in a
    /// loop.
    BadConfig { path: PathBuf, message: String },
    /// The module is already being loaded further up the stack; `chain` starts and ends with it.
    Cycle { chain: Vec<PathBuf> },
    /// [`MAX_REQUIRE_DEPTH`] modules are being loaded one inside the other already; `chain` is
    /// them, outermost first, and then the module that would have been one more.
    TooDeep { chain: Vec<PathBuf> },
    /// The specifier leads outside the requirer's project root: to a module there, to no module,
    /// or to something else. Told the same way in each case and without the paths out there, so
    /// a failed `require` is no oracle for which files exist elsewhere on disk.
    LeadsOutside {
        spec: String,
        caller: PathBuf,
        project: PathBuf,
    },
    /// The module's source does not compile; `message` starts with the line number.
    Compile { path: PathBuf, message: String },
    /// The module's source could not be read.
    Io { path: PathBuf, message: String },
    /// The module body returned `count` values instead of exactly one.
    BadReturn { path: PathBuf, count: usize },
    /// The module body raised an error while it ran.
    Runtime { path: PathBuf, error: mlua::Error },
}

/// The longest require path, in bytes. A longer one names no file (a path may have 4,096 bytes
/// in all, the root's included) and is refused before it is copied or quoted whole.
pub(crate) const MAX_SPEC_BYTES: usize = 1024;

/// How many modules may be loading one inside the other: 100. A module that requires another
/// from its top level nests it: the outer one is still loading while the inner one's top level
/// runs. Each level takes one of the 200 nested C calls a Luau thread allows (`LUAI_MAXCCALLS`),
/// and the code that made the outermost `require` may hold some already; past them Luau could
/// only answer "error in error handling".
pub(crate) const MAX_REQUIRE_DEPTH: usize = 100;

/// How many modules of a chain past [`MAX_REQUIRE_DEPTH`] the refusal names at each end.
const CHAIN_ENDS_NAMED: usize = 3;

/// The file candidates tried for the abstract module path `at`, in the order they are probed.
pub(crate) fn candidates(at: &Path) -> [PathBuf; 4] {
    let mut luau = at.as_os_str().to_owned();
    luau.push(".luau");
    let mut lua = at.as_os_str().to_owned();
    lua.push(".lua");
    [
        luau.into(),
        lua.into(),
        at.join("init.luau"),
        at.join("init.lua"),
    ]
}

impl fmt::Display for RequireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadSpecifier { spec, reason } => {
                write!(f, "invalid require path '{spec}': {reason}")
            }
            Self::TooLong { head, len } => write!(
                f,
                "invalid require path '{head}...' ({len} bytes): it is longer than the \
                 {MAX_SPEC_BYTES} bytes a require path may have"
            ),
            Self::NotFound { spec, caller, at, intermediate: true } => write!(
                f,
                "module '{spec}' not found from {}: no module or folder at {}",
                caller.display(),
                at.display()
            ),
            Self::NotFound { spec, caller, at, intermediate: false } if at.ends_with("init") => write!(
                f,
                "module '{spec}' not found from {}: an init file is its folder's module, so require {} instead",
                caller.display(),
                at.parent().unwrap_or(at).display()
            ),
            Self::NotFound { spec, caller, at, intermediate: false } => {
                let tried = candidates(at);
                write!(
                    f,
                    "module '{spec}' not found from {} (tried {}, {}, {}, {})",
                    caller.display(),
                    tried[0].display(),
                    tried[1].display(),
                    tried[2].display(),
                    tried[3].display()
                )
            }
            Self::Directory { spec, caller, at } => write!(
                f,
                "module '{spec}' from {} is a directory, not a module file: {} has no init.luau or init.lua",
                caller.display(),
                at.display()
            ),
            Self::NotRegular { spec, caller, file, kind } => write!(
                f,
                "module '{spec}' from {} is not a regular file: {} is {kind}, which is never read as a module",
                caller.display(),
                file.display()
            ),
            Self::Ambiguous { spec, caller, first, second } => write!(
                f,
                "module '{spec}' from {} is ambiguous: both {} and {} exist",
                caller.display(),
                first.display(),
                second.display()
            ),
            Self::UnknownAlias { alias, spec, caller } => write!(
                f,
                "unknown alias '@{alias}' in require path '{spec}' from {}: no .luaurc above it defines it",
                caller.display()
            ),
            Self::LeadsOutside { spec, caller, project } => write!(
                f,
                "module '{spec}' from {} leads outside the project root {}: modules are required only from below it (the main script's folder, or the nearest folder above it with a .luaurc)",
                caller.display(),
                project.display()
            ),
            Self::BadConfig { path, message } => {
                write!(f, "invalid .luaurc at {}: {message}", path.display())
            }
            Self::Cycle { chain } => {
                f.write_str("require cycle: ")?;
                for (i, path) in chain.iter().enumerate() {
                    if i > 0 {
                        f.write_str(" -> ")?;
                    }
                    write!(f, "{}", path.display())?;
                }
                Ok(())
            }
            Self::TooDeep { chain } => {
                write!(f, "require: modules nest more than {MAX_REQUIRE_DEPTH} deep: ")?;
                let named = |f: &mut fmt::Formatter<'_>, paths: &[PathBuf]| {
                    for (i, path) in paths.iter().enumerate() {
                        if i > 0 {
                            f.write_str(" requires ")?;
                        }
                        write!(f, "{}", path.display())?;
                    }
                    Ok(())
                };
                if chain.len() <= 2 * CHAIN_ENDS_NAMED {
                    return named(f, chain);
                }
                named(f, &chain[..CHAIN_ENDS_NAMED])?;
                write!(
                    f,
                    " requires ... ({} more) requires ",
                    chain.len() - 2 * CHAIN_ENDS_NAMED
                )?;
                named(f, &chain[chain.len() - CHAIN_ENDS_NAMED..])
            }
            Self::Compile { path, message } => {
                write!(f, "syntax error in {}:{message}", path.display())
            }
            Self::Io { path, message } => write!(f, "could not read module {}: {message}", path.display()),
            Self::BadReturn { path, count } => write!(
                f,
                "module {} must return exactly one value, but returned {count}",
                path.display()
            ),
            Self::Runtime { path, error } => {
                write!(f, "error while loading module {}: {error}", path.display())
            }
        }
    }
}

impl std::error::Error for RequireError {}

impl RequireError {
    /// Converts to the error the `require` global raises. A module body's own error is handed back
    /// unchanged, so its message and traceback reach the caller as the body raised them.
    pub(crate) fn into_lua_error(self) -> mlua::Error {
        match self {
            Self::Runtime { error, .. } => error,
            other => mlua::Error::runtime(other.to_string()),
        }
    }
}
