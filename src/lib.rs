//! Skein runs Luau in parallel inside a Rust process.
//!
//! A host embeds Skein as its parallel compute backend: a work-stealing [`Pool`] of worker
//! threads, each owning isolated Luau VMs, runs the work that [`ScriptDomain`]s hand it through
//! `jobs.dispatch`. Values cross between VMs as [`Message`]s, copied once each way; no VM is ever
//! shared between threads.
//!
//! # A host in ten lines
//!
//! A pool, a domain with a context its scripts bind handlers to, a main script, and the engine's
//! frame loop: one `advance(dt)` per frame, which resumes the `update` handler in the same frame
//! once the `parallelFor` it awaits is done (`docs/embedding.md`, "Driving a domain", says which
//! call runs what):
//!
//! ```rust
//! use std::time::Duration;
//! use skein::{ContextSpec, DomainSpec, Phase, Plan, Pool, ScriptDomain};
//! # // The host's working directory holds its scripts, and the module whose chunks the
//! # // update handler spreads over the pool.
//! # let dir = tempfile::tempdir()?;
//! # std::fs::create_dir(dir.path().join("scripts"))?;
//! # std::fs::write(dir.path().join("scripts/move.luau"), r#"
//! #     return { step = function(chunk)
//! #         local sum = 0
//! #         for i = chunk.first, chunk.last do sum += i * chunk.args.speed end
//! #         return sum
//! #     end }
//! # "#)?;
//! # std::env::set_current_dir(dir.path())?;
//!
//! // The main script binds an update handler that spreads its work over the pool.
//! std::fs::write("scripts/main.luau", r#"
//!     frames, moved = 0, 0
//!     require("@skein/context").bind("game", { update = function(dt)
//!         -- four chunks on the pool; the handler resumes in this frame, when all are done
//!         local sums = jobs.parallelFor("./move", "step", 2000, { speed = 2 }, { chunks = 4 }):await()
//!         frames += 1
//!         moved = sums[1] + sums[2] + sums[3] + sums[4]
//!     end })
//! "#)?;
//! let pool = Pool::with_available_parallelism();
//! let plan = Plan::new()
//!     .root("scripts")                       // where `require` and `jobs.parallelFor` resolve from
//!     .memory_limit(256 << 20);              // per VM; a job past it fails, a worker VM is rebuilt
//! let spec = DomainSpec::new("game")
//!     .plan(plan)
//!     .context(ContextSpec::new("game").phases([Phase::Startup, Phase::Update]))?;
//! let domain = ScriptDomain::new(&pool, spec)?;
//! domain.run_file("scripts/main.luau", &[])?.wait(&domain)?; // binds the `update` handler
//! for _frame in 0..60 {                      // the engine's frame loop: one call per frame
//!     let frame = domain.advance(Duration::from_millis(16))?; // update, its parallel work joined
//!     for failure in frame.reports { eprintln!("{}: {}", failure.source, failure.message); }
//! }
//! # // Every frame's update finished inside its own advance.
//! # assert_eq!(domain.eval("return frames")?, skein::Message::Number(60.0));
//! # assert_eq!(domain.eval("return moved")?, skein::Message::Number(4002000.0));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Add `[profile.dev.package.mlua-sys] opt-level = 3` to the host's own `Cargo.toml`: cargo
//! takes profiles only from the workspace being built, and without it Luau's interpreter is
//! compiled unoptimised in debug builds (`docs/embedding.md`, "Setting up").
//!
//! # Values in and out
//!
//! `eval` runs a chunk on the engine thread and answers its first result as a [`Message`]; here
//! it splits a sum between two jobs on the pool:
//!
//! ```
//! use skein::{DomainSpec, Message, Plan, Pool, ScriptDomain};
//!
//! // Scripts and the modules they dispatch live in a folder: the plan's root.
//! let dir = tempfile::tempdir()?;
//! std::fs::write(
//!     dir.path().join("squares.luau"),
//!     "return { sum = function(r) local s = 0 for i = r.first, r.last do s += i * i end return s end }",
//! )?;
//!
//! let pool = Pool::new(2);
//! let domain = ScriptDomain::new(&pool, DomainSpec::new("main").plan(Plan::new().root(dir.path())))?;
//! let total = domain.eval(r#"
//!     local a = jobs.dispatch("./squares", "sum", { first = 1, last = 500 })
//!     local b = jobs.dispatch("./squares", "sum", { first = 501, last = 1000 })
//!     return a:await() + b:await()
//! "#)?;
//! assert_eq!(total, Message::Number(333_833_500.0));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![warn(missing_docs)]

mod domain;
mod error;
mod jobs;
mod ledger;
mod pool;
mod principal;
mod resource;
mod shared;
mod sync;
mod value;
mod vm;

#[cfg(feature = "tracing")]
pub use domain::TracingSink;
pub use domain::{
    ActorError, ActorStage, AdvanceReport, ChromeTrace, ContextSpec, DomainMailbox, DomainSpec,
    DomainState, DomainStats, EventReport, FailurePolicy, FixedStep, FrameReport, HandlerTiming,
    InterfaceField, InterfaceInfo, InterruptHandle, LiveActors, Load, PhaseReport, PumpReport,
    Report, ReportKind, ResourceId, ResourceOwner, ScriptDomain, ScriptHandle, ScriptStatus,
    StillWaiting, ACTOR_SPAWN,
};
pub use error::{DispatchRefusal, Error, Halt, NameRefusal, ResourceRefusal, Result, SpecSetting};
pub use jobs::{
    JobInfo, JobOptions, JobOrder, JobStatus, Pool, Promise, PromiseStatus, WorkerCalls,
};
pub use ledger::{format_bytes, parse_size, MAX_TEXT_BYTES};
pub use pool::stats::{HeldKey, WarmRun, WorkerStats};
pub use principal::capability::{
    require_capability, CapabilityDenied, CapabilityError, CapabilityId, CapabilitySet, Grant,
    InvalidCapability, OverDelegation, RootAuthority, FILESYSTEM_READ, FILESYSTEM_WRITE,
};
pub use principal::{
    Attribution, Diagnostic, DiagnosticKind, DiagnosticSink, DomainId, EventLimits, EventTarget,
    Generation, LogLevel, LogRecord, LogSink, Phase, PostRefused, Principal, ProfileEvent,
    ProfileKind, ProfileSink, ProfileThread, QueueBound, Severity,
};
pub use resource::{
    HostFile, HostInterrupt, Manifest, ResourceHost, ResourceInfo, ResourceReport, ResourceState,
    StopOutcome,
};
pub use shared::{
    FrozenTable, PopError, PushError, PushErrorKind, QueueError, QueueOpenError,
    QueueOpenErrorKind, SharedQueueRef, SharedStore, SharedTableError, SharedTableErrorKind,
    SharedTableRef,
};
#[cfg(feature = "serde")]
pub use value::Serde;
pub use value::{
    ConvertError, ConvertErrorKind, DecodeError, DecodeErrorKind, FromMessage, IntoMessage, Limits,
    MapKey, Message, ResourceHandle, TransferError, TransferErrorKind,
};
pub use vm::{FailureKind, JobFailure, LoadStage, NativeMode, Plan};

/// The usual embedding set, for `use skein::prelude::*;`: what a host that builds a pool and a
/// domain, grants it capabilities, runs its scripts and trades values with them names most often.
/// Everything else is reached by its own name at the crate root (`skein::ChromeTrace`,
/// `skein::EventLimits`, ...); each bound is a constant of the type it bounds
/// (`SharedQueueRef::MAX_CAPACITY`, `Plan::MAX_SOURCE_BYTES`).
///
/// ```
/// use skein::prelude::*;
///
/// let pool = Pool::new(1);
/// let domain = ScriptDomain::new(&pool, DomainSpec::new("game").plan(Plan::new()))?;
/// let inbox = domain.shared().queue("inbox", SharedQueueRef::DEFAULT_CAPACITY)?;
/// inbox.push(Message::Boolean(true))?;
/// let got = domain.eval("return jobs.shared.queue('inbox'):tryPop() == true")?;
/// assert_eq!(got, Message::Boolean(true));
/// # Ok::<(), Error>(())
/// ```
pub mod prelude {
    pub use crate::{
        CapabilitySet, ContextSpec, DomainMailbox, DomainSpec, Error, FromMessage, Grant,
        IntoMessage, JobOptions, MapKey, Message, Phase, Plan, Pool, Promise, PromiseStatus,
        Report, Result, RootAuthority, ScriptDomain, SharedQueueRef, SharedTableRef,
    };
}

/// Re-exported so hosts use the same mlua as Skein.
pub use mlua;

/// The pool's lock-free protocols, exposed only to the loom models in `loom-tests`.
#[cfg(loom)]
#[doc(hidden)]
pub mod __loom {
    pub use crate::pool::executor::{Executor, Poll, WorkerContext, WorkerLogic};
    pub use crate::pool::handoff::{CancelOutcome, Handoff, HandoffState};
    pub use crate::pool::lanes::{Deliver, KeyLanes, Release, TooManyKeys, MAX_KEYS};
    pub use crate::pool::one_shot::{OneShot, Standing, Took};
    pub use crate::pool::sleep::{Sleep, SleepOutcome, AWAKE, SLEEPING};
    pub use crate::pool::stats::WorkerStats;
    pub use crate::pool::wake_queue::{wake_queue, Waited, WakeReceiver, WakeSender};
    pub use crate::shared::queue::{Delivery, PopNow, SharedQueue};
    pub use crate::shared::queue_ref::pop_blocking;
    pub use crate::shared::table::loom_support::{new_store, turn_taken};
    pub use crate::vm::budget::{
        CancelToken, InterruptHook, Interruption, OuterRun, RunTokens, Signal,
    };
}

/// The Rust blocks of `docs/embedding.md`, compiled and run by `cargo test --doc` from the guide
/// itself, so the guide cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../docs/embedding.md")]
pub struct EmbeddingGuide;

/// The Rust block of `README.md`, compiled and run by `cargo test --doc` from the README itself.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct Readme;
