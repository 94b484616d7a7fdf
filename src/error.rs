//! Skein's error type.

use std::fmt;

/// Everything that can go wrong in Skein, with the wording a user greps for.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A value can't cross a VM boundary; the message names its path.
    Transfer(crate::value::TransferError),
    /// A call was refused before anything ran (a bad option, argument or module path).
    Refused(String),
    /// Luau code raised an error; the text carries the Luau stack.
    Script(String),
    /// A job failed: which job, module and entry, what happened and the Luau stack.
    Job(Box<crate::vm::JobFailure>),
    /// The promise was cancelled before it settled.
    Cancelled,
    /// The value of a [`Promise`](crate::Promise) was taken already.
    PromiseTaken,
    /// The pool has shut down.
    PoolShutDown,
    /// Building a VM failed.
    Vm(String),
    /// Reading a file failed.
    Io(std::io::Error),
    /// A scheduler entry (`run_phase`, `advance`) was called while one of the same domain was
    /// running: a handler reached back into its own domain through host code. The field names
    /// the entry that was refused.
    Reentrant(&'static str),
    /// A capability check failed ([`require_capability`](crate::require_capability)).
    Capability(crate::CapabilityError),
    /// A delegation asked for capabilities the delegator does not hold.
    OverDelegation(crate::OverDelegation),
    /// [`ScriptDomain::reload`](crate::ScriptDomain::reload) discarded the generation it
    /// built: its load failed at `stage`. The running generation is untouched.
    ReloadFailed {
        /// Where the load failed.
        stage: crate::LoadStage,
        /// What went wrong, with the Luau stack when there is one.
        message: String,
    },
    /// [`ScriptDomain::run_until_idle`](crate::ScriptDomain::run_until_idle) of a domain whose
    /// host asked for a stall check ([`DomainSpec::detect_stalls`](crate::DomainSpec::detect_stalls))
    /// found that nothing can ever wake its tasks again.
    Stalled {
        /// Each wait of the engine VM: `path:line waits on ...`, oldest task first, then the
        /// pending promises no task awaits.
        waits: Vec<String>,
    },
}

/// `Result<T, skein::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Transfer(e) => write!(f, "{e}"),
            Error::Refused(m) | Error::Script(m) => write!(f, "{m}"),
            Error::Job(failure) => write!(f, "{failure}"),
            Error::Cancelled => write!(f, "cancelled"),
            Error::PromiseTaken => write!(f, "the promise's value was already taken"),
            Error::PoolShutDown => write!(f, "the pool has shut down"),
            Error::Vm(m) => write!(f, "could not build a VM: {m}"),
            Error::Io(e) => write!(f, "{e}"),
            Error::Reentrant(entry) => write!(
                f,
                "{entry}: re-entered the scheduler of a domain from one of its own handlers; \
                 queue an event or a task for the next frame instead"
            ),
            Error::Capability(e) => write!(f, "{e}"),
            Error::OverDelegation(e) => write!(f, "{e}"),
            Error::ReloadFailed { stage, message } => write!(
                f,
                "reload: the new generation failed to {stage}, the running one is kept: {message}"
            ),
            Error::Stalled { waits } => write!(
                f,
                "the run can never end: nothing can settle what its tasks wait on: {}",
                waits.join("; ")
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Transfer(e) => Some(e),
            Error::Io(e) => Some(e),
            Error::Capability(e) => Some(e),
            Error::OverDelegation(e) => Some(e),
            _ => None,
        }
    }
}

impl From<crate::value::TransferError> for Error {
    fn from(e: crate::value::TransferError) -> Self {
        Error::Transfer(e)
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e)
    }
}

impl From<crate::CapabilityError> for Error {
    fn from(e: crate::CapabilityError) -> Self {
        Error::Capability(e)
    }
}

impl From<crate::OverDelegation> for Error {
    fn from(e: crate::OverDelegation) -> Self {
        Error::OverDelegation(e)
    }
}

impl From<mlua::Error> for Error {
    fn from(e: mlua::Error) -> Self {
        Error::Script(crate::vm::error_message(&e))
    }
}
