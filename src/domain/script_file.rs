//! Reading a main script from disk: a regular file of at most [`MAX_SOURCE_BYTES`](crate::Plan::MAX_SOURCE_BYTES) bytes.
//!
//! The path comes from whoever starts the script (a user at a shell, a host's config), so what is
//! there may be a directory, a device that never ends (`/dev/zero`), a FIFO that blocks until a
//! writer comes, or a file of gigabytes. Each is refused quickly, naming the path, and no more
//! than the bound plus one byte is ever read. This module owns only that read; compiling the text
//! is the loader's business.

use std::io;
use std::path::{Path, PathBuf};

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
