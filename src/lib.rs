//! Skein runs Luau in parallel inside a Rust process.
//!
//! A host embeds Skein as its parallel compute backend: a work-stealing [`Pool`] of worker
//! threads, each owning isolated Luau VMs, runs the work that [`ScriptDomain`]s hand it through
//! `jobs.dispatch`. Values cross between VMs as [`Message`]s, copied once each way; no VM is ever
//! shared between threads.
//!
//! ```no_run
//! use skein::{DomainSpec, Pool, ScriptDomain};
//!
//! let pool = Pool::new(2);
//! let domain = ScriptDomain::new(&pool, DomainSpec::new("main"))?;
//! let answer = domain.eval(r#"
//!     return jobs.dispatch("./double", "run", 21):await()
//! "#)?;
//! # Ok::<(), skein::Error>(())
//! ```
#![warn(missing_docs)]

mod domain;
mod error;
mod jobs;
mod pool;
mod sync;
mod value;
mod vm;

pub use domain::{DomainSpec, Report, ScriptDomain};
pub use error::{Error, Result};
pub use jobs::{
    DomainId, DomainMailbox, Generation, Pool, Principal, Promise, PromiseStatus, MAX_DEADLINE,
};
pub use pool::stats::WorkerStats;
pub use value::{
    DecodeError, DecodeErrorKind, Limits, MapKey, Message, ResourceHandle, TransferError,
    TransferErrorKind,
};
pub use vm::{FailureKind, JobFailure, Plan, DEFAULT_MEMORY_LIMIT};

/// Re-exported so hosts use the same mlua as Skein.
pub use mlua;

/// The pool's lock-free protocols, exposed only to the loom models in `loom-tests`.
#[cfg(loom)]
#[doc(hidden)]
pub mod __loom {
    pub use crate::pool::executor::{Executor, Poll, WorkerContext, WorkerLogic};
    pub use crate::pool::handoff::{CancelOutcome, Handoff, HandoffState};
    pub use crate::pool::sleep::{Sleep, SleepOutcome, AWAKE, SLEEPING};
    pub use crate::pool::stats::WorkerStats;
}
