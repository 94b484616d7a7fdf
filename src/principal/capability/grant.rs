//! `RootAuthority` and `Grant`: the host's first grant of capabilities, with the file-system
//! roots that scope `filesystem.read` and `filesystem.write`.

use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use cap_std::ambient_authority;
use cap_std::fs::Dir;

use super::id::CapabilityId;
use super::set::{CapabilitySet, OverDelegation};

/// Reading files through `@skein/fs` (`readFile`, `list`), below the grant's read roots.
pub const FILESYSTEM_READ: &str = "filesystem.read";
/// Writing files through `@skein/fs` (`writeFile`), below the grant's write roots.
pub const FILESYSTEM_WRITE: &str = "filesystem.write";

/// The host's authority: the only way to make a first [`Grant`]. Scripts never see it, so a
/// script cannot grant itself anything.
///
/// ```
/// use skein::capability::{CapabilityId, CapabilitySet, RootAuthority};
/// use skein::DomainSpec;
/// let grant = RootAuthority::new()
///     .grant(CapabilitySet::from_iter([CapabilityId::new("input.observe")?]));
/// let spec = DomainSpec::new("game").grant(grant);
/// assert!(spec.granted().capabilities().contains(&CapabilityId::new("input.observe")?));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct RootAuthority(());

impl RootAuthority {
    /// The host's authority.
    pub fn new() -> RootAuthority {
        RootAuthority(())
    }

    /// Grants `capabilities`, with no file-system roots.
    pub fn grant(&self, capabilities: CapabilitySet) -> Grant {
        Grant {
            capabilities,
            read_roots: Vec::new(),
            write_roots: Vec::new(),
            read_dirs: Vec::new(),
            write_dirs: Vec::new(),
            working_dir: None,
        }
    }
}

impl Default for RootAuthority {
    fn default() -> Self {
        RootAuthority::new()
    }
}

/// What a domain may do: its capabilities, and the directories its file access is scoped to.
/// Made only from a [`RootAuthority`]; the default is empty (deny by default).
///
/// ```
/// use skein::capability::{CapabilityId, CapabilitySet, RootAuthority};
/// let dir = tempfile::tempdir()?;
/// let grant = RootAuthority::new().grant(CapabilitySet::new()).read_root(dir.path())?;
/// assert!(grant.capabilities().contains(&CapabilityId::new("filesystem.read")?));
/// assert_eq!(grant.read_roots(), &[dir.path().canonicalize()?]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Grant {
    capabilities: CapabilitySet,
    read_roots: Vec<PathBuf>,
    write_roots: Vec<PathBuf>,
    /// The roots opened, one per entry of `read_roots` (same order): `@skein/fs` resolves
    /// every path beneath one of these handles.
    read_dirs: Vec<Root>,
    write_dirs: Vec<Root>,
    /// The absolute folder a relative `@skein/fs` path resolves from, when it is not the
    /// process's current directory: a resource's folder. Only a name to pick the root by: the
    /// file is still opened beneath the root's handle.
    working_dir: Option<PathBuf>,
}

/// A granted directory, opened when it was granted: its canonical path, the absolute path the
/// host named it by, and the directory handle every `@skein/fs` path is resolved beneath (so the
/// kernel, not a path check, keeps the access inside it). Clones share the handle. Two roots are
/// equal when their canonical paths are.
#[derive(Clone)]
pub(crate) struct Root {
    path: PathBuf,
    named: PathBuf,
    dir: Arc<Dir>,
}

impl Root {
    fn open(dir: &Path) -> std::io::Result<Root> {
        let named_err =
            |e: std::io::Error| std::io::Error::new(e.kind(), format!("{}: {e}", dir.display()));
        let path = std::fs::canonicalize(dir).map_err(named_err)?;
        let opened = Dir::open_ambient_dir(&path, ambient_authority()).map_err(named_err)?;
        let named = lexical_absolute(dir).map_err(named_err)?;
        Ok(Root {
            path,
            named,
            dir: Arc::new(opened),
        })
    }

    /// The canonical path of the directory when it was granted.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The directory handle, opened at grant time.
    pub(crate) fn dir(&self) -> &Dir {
        &self.dir
    }

    /// `path` (absolute and lexically normal) as a path relative to this root, when it lies
    /// below the root's canonical path or the path the host named it by; the deeper match
    /// when both do.
    pub(crate) fn beneath<'a>(&self, path: &'a Path) -> Option<&'a Path> {
        let by_path = path.strip_prefix(&self.path).ok();
        let by_name = path.strip_prefix(&self.named).ok();
        match (by_path, by_name) {
            (Some(a), Some(b)) => Some(if a.as_os_str().len() <= b.as_os_str().len() {
                a
            } else {
                b
            }),
            (a, b) => a.or(b),
        }
    }
}

impl PartialEq for Root {
    fn eq(&self, other: &Root) -> bool {
        self.path == other.path
    }
}

impl Eq for Root {}

impl fmt::Debug for Root {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Root").field(&self.path).finish()
    }
}

/// `path` made absolute against the current directory, with `.` dropped and `..` taking off the
/// component before it by name (no link is followed: `a/link/..` is `a`).
///
/// # Errors
/// The current directory cannot be read (a relative `path` needs it).
pub(crate) fn lexical_absolute(path: &Path) -> std::io::Result<PathBuf> {
    lexical_absolute_in(None, path)
}

/// [`lexical_absolute`] against `base` (an absolute folder) when it is given, else against the
/// current directory.
///
/// # Errors
/// No `base` and the current directory cannot be read (a relative `path` needs it).
pub(crate) fn lexical_absolute_in(base: Option<&Path>, path: &Path) -> std::io::Result<PathBuf> {
    let mut out = if path.is_absolute() {
        PathBuf::new()
    } else if let Some(base) = base {
        base.to_path_buf()
    } else {
        std::env::current_dir()?
    };
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    Ok(out)
}

impl Grant {
    /// The capabilities granted.
    pub fn capabilities(&self) -> &CapabilitySet {
        &self.capabilities
    }

    /// The canonical directories `filesystem.read` reaches.
    pub fn read_roots(&self) -> &[PathBuf] {
        &self.read_roots
    }

    /// The canonical directories `filesystem.write` reaches.
    pub fn write_roots(&self) -> &[PathBuf] {
        &self.write_roots
    }

    /// The folder relative `@skein/fs` paths resolve from, when it is not the process's
    /// current directory.
    pub(crate) fn working_dir(&self) -> Option<&Path> {
        self.working_dir.as_deref()
    }

    /// Relative `@skein/fs` paths resolve from `dir` (absolute, canonical), not from the
    /// process's current directory; grants narrowed from this one keep it. What a path may
    /// reach is still only below the roots.
    pub(crate) fn with_working_dir(mut self, dir: PathBuf) -> Grant {
        self.working_dir = Some(dir);
        self
    }

    /// The opened roots `filesystem.write` (when `write`) or `filesystem.read` reaches.
    pub(crate) fn dirs(&self, write: bool) -> &[Root] {
        if write {
            &self.write_dirs
        } else {
            &self.read_dirs
        }
    }

    /// The part of this grant that `wanted` names, for a context or a child domain: only
    /// shrinking. The file-system roots go along with the file-system capabilities kept, so a
    /// holder of `filesystem.read` reads below the same roots as the grant it came from.
    ///
    /// # Errors
    /// [`OverDelegation`] naming `who` and every wanted capability this grant lacks.
    pub(crate) fn narrowed(
        &self,
        who: &str,
        wanted: &CapabilitySet,
    ) -> Result<Grant, OverDelegation> {
        let capabilities = self.capabilities.delegate_as(who, wanted)?;
        fn keep<T: Clone>(kept: bool, roots: &[T]) -> Vec<T> {
            if kept {
                roots.to_vec()
            } else {
                Vec::new()
            }
        }
        let read = capabilities.contains_name(FILESYSTEM_READ);
        let write = capabilities.contains_name(FILESYSTEM_WRITE);
        Ok(Grant {
            read_roots: keep(read, &self.read_roots),
            write_roots: keep(write, &self.write_roots),
            read_dirs: keep(read, &self.read_dirs),
            write_dirs: keep(write, &self.write_dirs),
            working_dir: self.working_dir.clone(),
            capabilities,
        })
    }

    /// Adds `filesystem.read`, reaching below the directory `dir`. It is canonicalised and
    /// opened now, and the grant (and every grant narrowed from it) keeps the open handle: every
    /// `@skein/fs` path is resolved beneath it, so a later symlink swap of `dir` does not move
    /// the root, and no link inside leads out.
    ///
    /// # Errors
    /// The I/O error of canonicalising or opening `dir` (it must exist and be a directory),
    /// naming it.
    pub fn read_root(mut self, dir: impl AsRef<Path>) -> std::io::Result<Grant> {
        let root = Root::open(dir.as_ref())?;
        self.read_roots.push(root.path.clone());
        self.read_dirs.push(root);
        self.capabilities.insert(known(FILESYSTEM_READ));
        Ok(self)
    }

    /// Adds `filesystem.write`, reaching below the directory `dir` (canonicalised and opened
    /// now, as [`read_root`](Self::read_root)).
    ///
    /// # Errors
    /// As [`read_root`](Self::read_root).
    pub fn write_root(mut self, dir: impl AsRef<Path>) -> std::io::Result<Grant> {
        let root = Root::open(dir.as_ref())?;
        self.write_roots.push(root.path.clone());
        self.write_dirs.push(root);
        self.capabilities.insert(known(FILESYSTEM_WRITE));
        Ok(self)
    }
}

fn known(name: &str) -> CapabilityId {
    CapabilityId::new(name).expect("built-in capability names are valid")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexical_absolute_takes_dots_off_by_name() {
        assert_eq!(
            lexical_absolute(Path::new("/a/b/../c/./d")).unwrap(),
            Path::new("/a/c/d")
        );
        assert_eq!(
            lexical_absolute(Path::new("/a/../../x")).unwrap(),
            Path::new("/x")
        );
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(
            lexical_absolute(Path::new("x/../y")).unwrap(),
            cwd.join("y")
        );
    }

    #[test]
    fn narrowing_keeps_roots_only_for_the_kept_fs_capabilities() {
        let dir = std::env::temp_dir();
        let full = RootAuthority::new()
            .grant(CapabilitySet::from_iter([known("input.observe")]))
            .read_root(&dir)
            .unwrap()
            .write_root(&dir)
            .unwrap();
        let read_only = full
            .narrowed("x", &CapabilitySet::from_iter([known(FILESYSTEM_READ)]))
            .unwrap();
        assert_eq!(read_only.read_roots(), full.read_roots());
        assert!(read_only.write_roots().is_empty());
        assert_eq!(read_only.capabilities().len(), 1);
        let err = read_only
            .narrowed(
                "context 'ui'",
                &CapabilitySet::from_iter([known("input.observe")]),
            )
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "context 'ui' cannot delegate capabilities it does not hold: input.observe"
        );
    }
}
