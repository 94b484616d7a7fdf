//! Reading a main script from disk: a regular file of at most [`MAX_SCRIPT_BYTES`] bytes.
//!
//! The path comes from whoever starts the script (a user at a shell, a host's config), so what is
//! there may be a directory, a device that never ends (`/dev/zero`), a FIFO that blocks until a
//! writer comes, or a file of gigabytes. Each is refused quickly, naming the path, and no more
//! than the bound plus one byte is ever read. This module owns only that read; compiling the text
//! is the loader's business.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The largest main script [`ScriptDomain::run_file`](super::ScriptDomain::run_file) reads:
/// 16 MiB.
///
/// Hand-written Luau is measured in kilobytes and generated code (a bundled program, a data
/// table) in a few megabytes; a script past 16 MiB is almost surely the wrong file, and the
/// compiler would hold several times its size while it works.
///
/// A file past it, or one that is not a regular file, is refused naming the path:
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
pub const MAX_SCRIPT_BYTES: u64 = 16 * 1024 * 1024;

/// The canonical path of the script at `path` and its bytes.
///
/// # Errors
/// [`Error::Io`] naming `path` when it is missing, unreadable, not a regular file, or longer
/// than [`MAX_SCRIPT_BYTES`].
pub(super) fn read(path: &Path) -> Result<(PathBuf, Vec<u8>)> {
    read_bounded(path, MAX_SCRIPT_BYTES)
}

fn read_bounded(path: &Path, bound: u64) -> Result<(PathBuf, Vec<u8>)> {
    let named = |e: io::Error| {
        Error::Io(io::Error::new(
            e.kind(),
            format!("cannot read the script {}: {e}", path.display()),
        ))
    };
    let refused = |why: String| {
        Error::Io(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("cannot read the script {}: {why}", path.display()),
        ))
    };
    let canonical = std::fs::canonicalize(path).map_err(named)?;
    // Looked at before opening: opening a FIFO for reading blocks until a writer comes.
    let kind = std::fs::metadata(&canonical).map_err(named)?.file_type();
    if !kind.is_file() {
        return Err(refused(not_a_file(kind).to_owned()));
    }
    let file = File::open(&canonical).map_err(named)?;
    // And again on the open file, which is what is read: the path may have changed meanwhile.
    let meta = file.metadata().map_err(named)?;
    if !meta.is_file() {
        return Err(refused(not_a_file(meta.file_type()).to_owned()));
    }
    let too_long = || refused(format!("it is longer than the limit of {bound} bytes"));
    if meta.len() > bound {
        return Err(too_long());
    }
    let mut source = Vec::with_capacity(meta.len() as usize);
    // The length may grow after the check; the read stops one byte past the bound either way.
    file.take(bound + 1)
        .read_to_end(&mut source)
        .map_err(named)?;
    if source.len() as u64 > bound {
        return Err(too_long());
    }
    Ok((canonical, source))
}

/// Why a file type that is not a regular file can't be a script.
fn not_a_file(kind: std::fs::FileType) -> &'static str {
    if kind.is_dir() {
        "it is a directory, not a file"
    } else {
        "it is not a regular file (a device, FIFO or socket is never read as a script)"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_at_the_bound_is_read_and_one_byte_past_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.luau");
        std::fs::write(&path, vec![b'-'; 100]).unwrap();
        let (_, source) = read_bounded(&path, 100).unwrap();
        assert_eq!(source.len(), 100);
        std::fs::write(&path, vec![b'-'; 101]).unwrap();
        let e = read_bounded(&path, 100).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "cannot read the script {}: it is longer than the limit of 100 bytes",
                path.display()
            )
        );
    }
}
