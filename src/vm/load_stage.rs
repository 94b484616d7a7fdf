//! [`LoadStage`]: the steps a chunk goes through when a VM loads it (read, compile, run,
//! finish), so a failed load can say where it failed. It names no domain: the domain's load
//! (`domain/generation/load.rs`) and the crate's `Error::ReloadFailed` both use it.

use std::fmt;

/// Where a load failed.
///
/// ```
/// use skein::lifecycle::LoadStage;
///
/// assert_eq!(LoadStage::Compile.name(), "compile");
/// assert_eq!(LoadStage::Finish.to_string(), "finish");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LoadStage {
    /// The file of a [`Load::File`](crate::lifecycle::Load::File) could not be read.
    Read,
    /// The chunk does not compile.
    Compile,
    /// Its task raised.
    Run,
    /// Its task did not end: what it waits on can never come, or the load bound passed.
    Finish,
}

impl LoadStage {
    /// The stage's name, as `Display` writes it (a verb: "failed to compile").
    pub fn name(self) -> &'static str {
        match self {
            LoadStage::Read => "read",
            LoadStage::Compile => "compile",
            LoadStage::Run => "run",
            LoadStage::Finish => "finish",
        }
    }
}

impl fmt::Display for LoadStage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
