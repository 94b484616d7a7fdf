//! Reading a main script from disk: a regular file of at most [`MAX_SOURCE_BYTES`](crate::Plan::MAX_SOURCE_BYTES) bytes.
//!
//! The path comes from whoever starts the script (a user at a shell, a host's config), so what is
//! there may be a directory, a device that never ends (`/dev/zero`), a FIFO that blocks until a
//! writer comes, or a file of gigabytes. Each is refused quickly, naming the path, and no more
//! than the bound plus one byte is ever read. This module owns only that read; compiling the text
//! is the loader's business.

use std::io;
use std::path::{Component, Path, PathBuf};

use cap_std::fs::Dir;

use crate::error::{Error, Result};
use crate::vm;

/// The canonical path of the script at `path` and its bytes: a regular file of at most
/// [`MAX_SOURCE_BYTES`](crate::Plan::MAX_SOURCE_BYTES), read as [`vm::source::read_bounded`] reads every source file.
///
/// A file past the bound, or one that is not a regular file, is refused naming the path:
///
/// ```
/// use skein::{DomainSpec, Pool, ScriptDomain};
///
/// let dir = tempfile::tempdir()?;
/// let pool = Pool::new(1);
/// let domain = ScriptDomain::new(&pool, DomainSpec::new("main"))?;
/// let refused = domain.run_file(dir.path(), &[]).unwrap_err();
/// assert_eq!(
///     refused.to_string(),
///     format!("cannot read the script {}: it is a directory, not a file", dir.path().display())
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// [`Error::Io`] naming `path` when it is missing, unreadable, not a regular file, or longer
/// than [`MAX_SOURCE_BYTES`](crate::Plan::MAX_SOURCE_BYTES).
pub(super) fn read(path: &Path) -> Result<(PathBuf, Vec<u8>)> {
    let named = |e: io::Error| {
        Error::Io(io::Error::new(
            e.kind(),
            format!("cannot read the script {}: {e}", path.display()),
        ))
    };
    let canonical = std::fs::canonicalize(path).map_err(named)?;
    let source = vm::source::read_bounded(&canonical).map_err(named)?;
    Ok((canonical, source))
}

/// The path and bytes of the script `relative` (a relative path with no `..`) beneath `folder`,
/// opened through `dir`, the folder's handle, as `@skein/fs` opens beneath a granted root:
/// `cap-std` resolves it component by component beneath the handle and refuses a symbolic link
/// that leads out of the folder at the time of the open. The path answered is the folder's
/// canonical path and `relative` below it, so the script requires as a file of the folder.
///
/// # Errors
/// [`Error::Io`] naming the path: as [`read`], and `it leads outside the folder FOLDER` for a
/// link (or a path) that leaves it.
pub(crate) fn read_beneath(dir: &Dir, folder: &Path, relative: &str) -> Result<(PathBuf, Vec<u8>)> {
    let folder = std::fs::canonicalize(folder).unwrap_or_else(|_| folder.to_owned());
    let mut path = folder.clone();
    path.extend(
        Path::new(relative)
            .components()
            .filter(|c| !matches!(c, Component::CurDir)),
    );
    let named = |e: io::Error| {
        let why = if e.kind() == io::ErrorKind::PermissionDenied && e.raw_os_error().is_none() {
            format!("it leads outside the folder {}", folder.display())
        } else {
            e.to_string()
        };
        Error::Io(io::Error::new(
            e.kind(),
            format!("cannot read the script {}: {why}", path.display()),
        ))
    };
    // Looked at before the open, so a FIFO or device is refused, not opened (which could
    // block); the open file's own kind and size are checked again as it is read.
    let kind = dir.metadata(relative).map_err(named)?.file_type();
    if !kind.is_file() {
        let why = if kind.is_dir() {
            "it is a directory, not a file"
        } else {
            "it is not a regular file (a device, FIFO or socket is never read as a script)"
        };
        return Err(named(io::Error::new(io::ErrorKind::InvalidInput, why)));
    }
    let file = dir.open(relative).map_err(named)?.into_std();
    let source = vm::source::read_open_bounded(file).map_err(named)?;
    Ok((path, source))
}

/// How a main script's path is shown: relative to the current folder when it lies beneath it.
pub(crate) fn display_name(path: &Path) -> String {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    path.strip_prefix(&cwd)
        .unwrap_or(path)
        .display()
        .to_string()
}
