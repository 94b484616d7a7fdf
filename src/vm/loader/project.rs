//! Where a module may come from: below its requirer's project root.
//!
//! A script is given a folder, not the disk. The *project root* of a script the host started
//! (a main script, a file a domain loads) is the nearest folder at or above the script's own
//! that holds a `.luaurc`, or else the script's folder; for code with no file of its own (host
//! snippets, worker sources) it is that of the plan's root (`Plan::root`). A module keeps the
//! project root of the script that first required it ([`register`]), so its own `require`s, on
//! any VM, are confined the same way. A resolved module (canonical: links and `..` already
//! followed) outside its requirer's project root is refused before it is read or compiled, so a
//! module cannot reach, run, or quote in a syntax error a file elsewhere on disk through `../`,
//! an alias or a symbolic link. The refusal is the same whether anything is out there or not
//! ([`RequireError::LeadsOutside`]): a failed `require` tells nothing of the disk outside.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use super::error::{candidates, RequireError};
use super::luaurc::LUAURC;

/// Module files resolved so far, process-wide, with the project root each was resolved under.
fn registry() -> &'static Mutex<HashMap<PathBuf, Arc<Path>>> {
    static REGISTRY: OnceLock<Mutex<HashMap<PathBuf, Arc<Path>>>> = OnceLock::new();
    REGISTRY.get_or_init(Mutex::default)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The project root of a script in the folder `dir`: the nearest folder at or above it holding
/// a `.luaurc` file, else `dir` itself (canonical when it exists).
pub(crate) fn root_of_folder(dir: &Path) -> Arc<Path> {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_owned());
    let found = dir
        .ancestors()
        .find(|d| d.join(LUAURC).is_file())
        .map(Path::to_owned);
    found.unwrap_or(dir).into()
}

/// The project root the module or script `file` requires under: the one it was registered
/// with when it was required, else (a script the host started) its own.
pub(crate) fn root_of_file(file: &Path) -> Arc<Path> {
    if let Some(root) = lock(registry()).get(file) {
        return root.clone();
    }
    root_of_folder(file.parent().unwrap_or(file))
}

/// Records that `module` was resolved under `project`; the first record stands.
pub(crate) fn register(module: &Path, project: &Arc<Path>) {
    lock(registry())
        .entry(module.to_owned())
        .or_insert_with(|| project.clone());
}

/// Checks that `module` (canonical) lies below `project`.
///
/// # Errors
/// `LeadsOutside` naming the specifier, the requirer and the root, not the module: the same
/// text [`confine_error`] gives when nothing is out there.
pub(crate) fn check(
    module: &Path,
    project: &Path,
    spec: &str,
    caller: &Path,
) -> Result<(), RequireError> {
    if module.starts_with(project) {
        return Ok(());
    }
    Err(leads_outside(project, spec, caller))
}

fn leads_outside(project: &Path, spec: &str, caller: &Path) -> RequireError {
    RequireError::LeadsOutside {
        spec: spec.to_owned(),
        caller: caller.to_owned(),
        project: project.to_owned(),
    }
}

/// A failed resolution, told without naming what lies outside `project`: a module not found,
/// ambiguous, a folder or not a regular file at a path that leads outside it (by name, or
/// through a symbolic link, dangling or not) becomes `LeadsOutside`, as a module found out there
/// does ([`check`]), so a failed `require` is no oracle for which files exist elsewhere on disk.
pub(crate) fn confine_error(
    error: RequireError,
    project: &Path,
    spec: &str,
    caller: &Path,
) -> RequireError {
    let outside = |path: &Path| leads_out(path, project);
    let out = match &error {
        // The candidates too: one may be a link out that leads nowhere.
        RequireError::NotFound { at, .. } => {
            outside(at) || candidates(at).iter().any(|c| outside(c))
        }
        RequireError::Ambiguous { first, second, .. } => outside(first) || outside(second),
        RequireError::Directory { at, .. } => outside(at),
        RequireError::NotRegular { file, .. } => outside(file),
        _ => false,
    };
    if out {
        leads_outside(project, spec, caller)
    } else {
        error
    }
}

/// How many dangling links [`real_location`] follows one after the other: Linux's own bound.
const MAX_LINK_HOPS: usize = 40;

/// Whether `path` lies outside `project`, by name or where it leads on disk.
fn leads_out(path: &Path, project: &Path) -> bool {
    !path.starts_with(project) || !real_location(path, 0).starts_with(project)
}

/// Where `path` leads on disk, whether or not it exists: its deepest part that exists with
/// every link followed, then the rest as written. A dangling link is followed to where it
/// points, so a link out leads out whether its target exists or not.
fn real_location(path: &Path, hops: usize) -> PathBuf {
    if let Ok(real) = std::fs::canonicalize(path) {
        return real;
    }
    if hops < MAX_LINK_HOPS {
        if let Ok(target) = std::fs::read_link(path) {
            let base = path.parent().unwrap_or(path);
            return real_location(&base.join(target), hops + 1);
        }
    }
    let Some(parent) = path.parent() else {
        return path.to_owned();
    };
    match path.components().next_back() {
        Some(Component::Normal(name)) => real_location(parent, hops).join(name),
        Some(Component::ParentDir) => {
            let mut up = real_location(parent, hops);
            up.pop();
            up
        }
        Some(Component::CurDir) => real_location(parent, hops),
        _ => path.to_owned(),
    }
}
