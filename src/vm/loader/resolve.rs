//! Require-by-string: turning a specifier and the requiring file into one module file.
//!
//! The rules follow Luau's require-by-string RFCs (`require-by-string-aliases.md`,
//! `amended-require-resolution.md`, `abstract-module-paths-and-init-dot-luau.md` in
//! luau-lang/rfcs) and Luau 0.740's own navigator (`Require/src/RequireNavigator.cpp`):
//!
//! - A specifier starts with `./`, `../` or `@`; anything else is refused. `\` counts as `/`.
//! - Every module has an abstract *module path*: `dir/m.luau` is `dir/m`, and `dir/init.luau` is
//!   `dir` (the folder *is* the module).
//! - `./x` and `../x` start from the parent of the requirer's module path. So from `dir/m.luau`,
//!   `./x` is `dir/x`; from `dir/init.luau`, `./x` is a sibling of `dir`, not a child.
//! - `@self/x` starts from the requirer's module path itself: from `dir/init.luau` it is `dir/x`,
//!   from `dir/m.luau` it is `dir/m/x`. `@self` is never looked up in a `.luaurc`.
//! - `@name/x` looks for `name` (ASCII case-insensitive) in the `.luaurc` of each folder above the
//!   requirer's module path, nearest first, and the first file that defines it wins. A relative
//!   alias value is relative to the folder holding that `.luaurc`; an absolute one is used as is;
//!   a value starting with `@` continues from that alias (same file first, then folders above).
//!   The search starts above the module path, so an `init.luau` does not read the `.luaurc` in
//!   its own folder (Luau's navigator does the same: that folder *is* the module).
//! - Each path component is one step: `.` stays, `..` goes up, a name goes down and must exist as
//!   exactly one of `P.luau`, `P.lua`, `P/init.luau`, `P/init.lua`, or as a plain folder (a folder
//!   without `init` may only be passed through). A component named `init` never matches a file
//!   directly, so `./dir/init` does not name `dir/init.luau`: require `./dir` instead.
//!
//! The requirer may also be a folder: the top level of an inline chunk run "in" that folder.
//! Then `./x`, `@self/x` and alias lookups all start from the folder itself.
//!
//! This module only reads the file system; it loads nothing.

use std::path::{Component, Path, PathBuf};

use super::error::{candidates, RequireError, MAX_SPEC_BYTES};
use super::luaurc;
use crate::vm::source::file_kind;

/// Aliases that refer to aliases may chain this deep before we call it a loop.
const MAX_ALIAS_DEPTH: usize = 16;

/// Resolves `spec` as required from `caller` (an absolute module file, or a folder for an inline
/// chunk) to the canonical path of the module file.
///
/// # Errors
///
/// `BadSpecifier` for a specifier of the wrong form, `NotFound` and `Ambiguous` when a component
/// does not name exactly one module or folder, `Directory` when the last names a folder without
/// an init file, `NotRegular` when its file is a FIFO, a device or a socket, `UnknownAlias` and
/// `BadConfig` for alias trouble.
pub(crate) fn resolve(caller: &Path, spec: &str) -> Result<PathBuf, RequireError> {
    if spec.len() > MAX_SPEC_BYTES {
        let mut end = 64;
        while !spec.is_char_boundary(end) {
            end -= 1;
        }
        return Err(RequireError::TooLong {
            head: spec[..end].to_owned(),
            len: spec.len(),
        });
    }
    let normalized = spec.replace('\\', "/");
    let kind = classify(spec, &normalized)?;
    let caller = std::path::absolute(caller).unwrap_or_else(|_| caller.to_owned());
    let ctx = Walk {
        spec,
        caller: &caller,
    };
    let requirer = Requirer::of(&caller);
    let (start, rest) = match kind {
        SpecKind::Relative => (requirer.parent(), normalized.as_str()),
        SpecKind::Alias { name, rest } if name.eq_ignore_ascii_case("self") => {
            (requirer.module_path(), rest)
        }
        SpecKind::Alias { name, rest } => (ctx.alias_base(&requirer.parent(), name, 0)?, rest),
    };
    let file = ctx.walk(start, rest)?;
    std::fs::canonicalize(&file).map_err(|e| RequireError::Io {
        path: file,
        message: e.to_string(),
    })
}

/// The forms a specifier may take.
enum SpecKind<'a> {
    /// `./…` or `../…`: from the parent of the requirer's module path.
    Relative,
    /// `@name` or `@name/rest`.
    Alias { name: &'a str, rest: &'a str },
}

fn classify<'a>(spec: &str, normalized: &'a str) -> Result<SpecKind<'a>, RequireError> {
    let bad = |reason| RequireError::BadSpecifier {
        spec: spec.to_owned(),
        reason,
    };
    if normalized.is_empty() {
        return Err(bad("it is empty"));
    }
    let last = normalized.rsplit('/').next().unwrap_or_default();
    if last.ends_with(".luau") || last.ends_with(".lua") {
        return Err(bad("leave out the file extension"));
    }
    if normalized.starts_with("./") || normalized.starts_with("../") {
        return Ok(SpecKind::Relative);
    }
    if let Some(aliased) = normalized.strip_prefix('@') {
        let (name, rest) = aliased.split_once('/').unwrap_or((aliased, ""));
        if name.is_empty() {
            return Err(bad("an alias name must follow '@'"));
        }
        return Ok(SpecKind::Alias { name, rest });
    }
    if normalized.starts_with('/') || Path::new(normalized).is_absolute() {
        return Err(bad(
            "absolute paths are not allowed; start it with ./, ../ or @",
        ));
    }
    Err(bad("it must start with ./, ../ or @"))
}

/// The requiring context: a module file, or a folder for an inline chunk.
enum Requirer {
    /// The abstract module path of the requiring file.
    Module(PathBuf),
    /// The folder an inline chunk runs in.
    Folder(PathBuf),
}

impl Requirer {
    fn of(caller: &Path) -> Self {
        if caller.is_dir() {
            return Self::Folder(caller.to_owned());
        }
        let stem = caller.with_extension("");
        if stem.file_name().is_some_and(|n| n == "init") {
            Self::Module(stem.parent().map_or(stem.clone(), Path::to_owned))
        } else {
            Self::Module(stem)
        }
    }

    /// Where `./` starts and where the `.luaurc` search starts.
    fn parent(&self) -> PathBuf {
        match self {
            Self::Module(path) => path.parent().map_or(path.clone(), Path::to_owned),
            Self::Folder(dir) => dir.clone(),
        }
    }

    /// Where `@self` starts.
    fn module_path(&self) -> PathBuf {
        match self {
            Self::Module(path) | Self::Folder(path) => path.clone(),
        }
    }
}

/// What one abstract module path names on disk.
enum Node {
    Module(PathBuf),
    /// The one candidate there is not a regular file: what it is, with its article.
    NotRegular(PathBuf, &'static str),
    Folder,
    Missing,
    Ambiguous(PathBuf, PathBuf),
}

/// Looks at the candidates of `at` by their metadata only: nothing is opened, so a FIFO named
/// like a module is told apart without blocking on it.
fn probe(at: &Path) -> Node {
    let is_init = at.file_name().is_some_and(|n| n == "init");
    let [luau, lua, init_luau, init_lua] = candidates(at);
    let files = if is_init {
        vec![init_luau, init_lua]
    } else {
        vec![luau, lua, init_luau, init_lua]
    };
    let mut found = files
        .into_iter()
        .filter_map(|f| std::fs::metadata(&f).ok().map(|m| (f, m.file_type())));
    match (found.next(), found.next()) {
        (Some((first, _)), Some((second, _))) => Node::Ambiguous(first, second),
        (Some((file, kind)), None) if kind.is_file() => Node::Module(file),
        (Some((file, kind)), None) => Node::NotRegular(file, file_kind(kind)),
        (None, _) if at.is_dir() => Node::Folder,
        (None, _) => Node::Missing,
    }
}

/// One resolution in progress: the specifier and caller, for errors.
struct Walk<'a> {
    spec: &'a str,
    caller: &'a Path,
}

impl Walk<'_> {
    /// Follows `rest` component by component from `start` and returns the module file it names.
    fn walk(&self, start: PathBuf, rest: &str) -> Result<PathBuf, RequireError> {
        let mut at = start;
        let components: Vec<&str> = rest
            .split('/')
            .filter(|c| !c.is_empty() && *c != ".")
            .collect();
        for (i, component) in components.iter().enumerate() {
            if *component == ".." {
                at = at.parent().map_or(at.clone(), Path::to_owned);
                continue;
            }
            at.push(component);
            let last = i + 1 == components.len();
            match probe(&at) {
                Node::Ambiguous(first, second) => return Err(self.ambiguous(first, second)),
                Node::Missing if !last => return Err(self.not_found(at, true)),
                _ => {}
            }
        }
        match probe(&at) {
            Node::Module(file) => Ok(file),
            Node::Ambiguous(first, second) => Err(self.ambiguous(first, second)),
            Node::NotRegular(file, kind) => Err(RequireError::NotRegular {
                spec: self.spec.to_owned(),
                caller: self.caller.to_owned(),
                file,
                kind,
            }),
            Node::Folder if !at.ends_with("init") => Err(RequireError::Directory {
                spec: self.spec.to_owned(),
                caller: self.caller.to_owned(),
                at,
            }),
            Node::Folder | Node::Missing => Err(self.not_found(at, false)),
        }
    }

    /// Finds where alias `name` points, searching the `.luaurc` of `from` and each folder above.
    fn alias_base(&self, from: &Path, name: &str, depth: usize) -> Result<PathBuf, RequireError> {
        for dir in from.ancestors() {
            let Some(rc) = luaurc::load(dir)? else {
                continue;
            };
            if let Some(value) = rc.alias(name) {
                return self.alias_value(dir, &rc, name, value, depth);
            }
        }
        Err(RequireError::UnknownAlias {
            alias: name.to_owned(),
            spec: self.spec.to_owned(),
            caller: self.caller.to_owned(),
        })
    }

    /// Turns the value of alias `name`, found in the `.luaurc` of `dir`, into a path.
    fn alias_value(
        &self,
        dir: &Path,
        rc: &luaurc::LuauRc,
        name: &str,
        value: &str,
        depth: usize,
    ) -> Result<PathBuf, RequireError> {
        let value = value.replace('\\', "/");
        let Some(chained) = value.strip_prefix('@') else {
            return Ok(normalize(&dir.join(&value)));
        };
        if depth >= MAX_ALIAS_DEPTH {
            return Err(RequireError::BadConfig {
                path: dir.join(luaurc::LUAURC),
                message: format!(
                    "alias \"{name}\" refers to aliases more than {MAX_ALIAS_DEPTH} deep (a loop?)"
                ),
            });
        }
        let (next, rest) = chained.split_once('/').unwrap_or((chained, ""));
        let base = match rc.alias(next) {
            Some(next_value) => self.alias_value(dir, rc, next, next_value, depth + 1)?,
            None => match dir.parent() {
                Some(parent) => self.alias_base(parent, next, depth + 1)?,
                None => self.alias_base(dir, next, depth + 1)?,
            },
        };
        Ok(normalize(&base.join(rest)))
    }

    fn ambiguous(&self, first: PathBuf, second: PathBuf) -> RequireError {
        RequireError::Ambiguous {
            spec: self.spec.to_owned(),
            caller: self.caller.to_owned(),
            first,
            second,
        }
    }

    fn not_found(&self, at: PathBuf, intermediate: bool) -> RequireError {
        RequireError::NotFound {
            spec: self.spec.to_owned(),
            caller: self.caller.to_owned(),
            at,
            intermediate,
        }
    }
}

/// Removes `.` and folds `..` lexically (alias values are paths as written, not yet on disk).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other),
        }
    }
    out
}
