//! `JobFailure`: why the work behind a promise did not produce a value, as structured data.

use std::fmt;
use std::path::PathBuf;

/// What kind of failure a [`JobFailure`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailureKind {
    /// The entry (or a task it awaited) raised an error.
    Raised,
    /// One run of the entry took longer than its deadline.
    Deadline,
    /// Host (Rust) code called by the entry panicked.
    Panicked,
    /// The module could not be loaded, or has no such entry function.
    Load,
    /// The arguments or the result could not cross between VMs.
    Transfer,
    /// The item was refused unrun (its domain stopped or restarted).
    Refused,
    /// The job had started when its domain stopped or restarted: its work was dropped with
    /// the generation it ran for.
    Ended,
}

/// Why a job failed: which job, which module and entry, what happened, and the Luau stack.
///
/// `Display` gives `job 'solver' failed: solve.luau:12: no solution` followed by the stack;
/// Luau code that awaits the job and catches its error sees the first part alone
/// ([`headline`](Self::headline)).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobFailure {
    /// How the job is named: its `opts.name`, or `module:entry`.
    pub job: String,
    /// The module file the entry lives in.
    pub module: Option<PathBuf>,
    /// The entry's name.
    pub entry: Option<String>,
    /// What kind of failure.
    pub kind: FailureKind,
    /// The error message.
    pub message: String,
    /// The Luau stack where the error was raised, when there is one.
    pub traceback: Option<String>,
}

impl JobFailure {
    /// The failure without its stack: `job 'solver' failed: solve.luau:12: no solution`, the
    /// error an await raises in Luau. A message that carries a stack of its own (a module's
    /// load failure) ends before it.
    pub fn headline(&self) -> String {
        let mut text = Headline(self).to_string();
        if let Some(at) = text.find("\nstack traceback:") {
            text.truncate(at);
        }
        text
    }
}

/// A [`JobFailure`] written without its stack.
struct Headline<'a>(&'a JobFailure);

impl fmt::Display for Headline<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let failure = self.0;
        match failure.kind {
            FailureKind::Refused => write!(
                f,
                "job '{}' was refused unrun: {}",
                failure.job, failure.message
            ),
            FailureKind::Ended => write!(
                f,
                "job '{}' ended with its domain's generation: {}",
                failure.job, failure.message
            ),
            _ => write!(f, "job '{}' failed: {}", failure.job, failure.message),
        }
    }
}

impl fmt::Display for JobFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Headline(self).fmt(f)?;
        if let Some(tb) = self.traceback.as_deref().filter(|t| !t.is_empty()) {
            write!(f, "\n{tb}")?;
        }
        Ok(())
    }
}

impl std::error::Error for JobFailure {}
