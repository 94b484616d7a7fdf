//! `RootAuthority` and `Grant`: the host's first grant of capabilities, with the file-system
//! roots that scope `filesystem.read` and `filesystem.write`.

use std::path::{Path, PathBuf};

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
/// use skein::{CapabilityId, CapabilitySet, DomainSpec, RootAuthority};
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
/// use skein::{CapabilityId, CapabilitySet, RootAuthority};
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
        let keep = |name: &str, roots: &[PathBuf]| {
            if capabilities.contains_name(name) {
                roots.to_vec()
            } else {
                Vec::new()
            }
        };
        Ok(Grant {
            read_roots: keep(FILESYSTEM_READ, &self.read_roots),
            write_roots: keep(FILESYSTEM_WRITE, &self.write_roots),
            capabilities,
        })
    }

    /// Adds `filesystem.read`, reaching below `dir` (canonicalised now, so a later symlink swap
    /// does not move the root).
    ///
    /// # Errors
    /// The I/O error of canonicalising `dir` (it must exist), naming it.
    pub fn read_root(mut self, dir: impl AsRef<Path>) -> std::io::Result<Grant> {
        self.read_roots.push(canonical(dir.as_ref())?);
        self.capabilities.insert(known(FILESYSTEM_READ));
        Ok(self)
    }

    /// Adds `filesystem.write`, reaching below `dir` (canonicalised now).
    ///
    /// # Errors
    /// As [`read_root`](Self::read_root).
    pub fn write_root(mut self, dir: impl AsRef<Path>) -> std::io::Result<Grant> {
        self.write_roots.push(canonical(dir.as_ref())?);
        self.capabilities.insert(known(FILESYSTEM_WRITE));
        Ok(self)
    }
}

fn canonical(dir: &Path) -> std::io::Result<PathBuf> {
    std::fs::canonicalize(dir)
        .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", dir.display())))
}

fn known(name: &str) -> CapabilityId {
    CapabilityId::new(name).expect("built-in capability names are valid")
}

#[cfg(test)]
mod tests {
    use super::*;

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
