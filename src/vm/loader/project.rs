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
//! an alias or a symbolic link.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use super::error::RequireError;
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
/// `OutsideRoots` naming the specifier, the requirer, the module and the root.
pub(crate) fn check(
    module: &Path,
    project: &Path,
    spec: &str,
    caller: &Path,
) -> Result<(), RequireError> {
    if module.starts_with(project) {
        return Ok(());
    }
    Err(RequireError::OutsideRoots {
        spec: spec.to_owned(),
        caller: caller.to_owned(),
        module: module.to_owned(),
        project: project.to_owned(),
    })
}

/// A failed resolution, told without naming what lies outside `project`: a module not found (or
/// ambiguous) at a path outside it becomes `LeadsOutside`, so a failed `require` is no oracle for
/// which files exist elsewhere on disk.
pub(crate) fn confine_error(
    error: RequireError,
    project: &Path,
    spec: &str,
    caller: &Path,
) -> RequireError {
    let outside = match &error {
        RequireError::NotFound { at, .. } => !at.starts_with(project),
        RequireError::Ambiguous { first, .. } => !first.starts_with(project),
        _ => false,
    };
    if outside {
        RequireError::LeadsOutside {
            spec: spec.to_owned(),
            caller: caller.to_owned(),
            project: project.to_owned(),
        }
    } else {
        error
    }
}
