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
//! # Where things are
//!
//! The crate root holds what nearly every host names: the pool, the domain and its specs, the
//! plan, messages, promises, errors and reports. The rest is grouped by what it is for, one path
//! each: [`shared`] tables and queues, [`capability`] grants, [`resource`] hosts, [`actor`]
//! failures, [`frame`] and [`event`] reports, [`job`] options and snapshots, a domain's
//! [`lifecycle`], its [`stats`], [`log`], [`diagnostic`] and [`profile`] streams, the
//! [`message`] errors and bounds, the [`refusal`] rules of [`Error`], [`interface`] listings
//! and byte [`size`]s. [`prelude`] holds the usual set for a glob import.
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
mod executor;
mod jobs;
mod ledger;
mod principal;
pub mod resource;
pub mod shared;
mod sync;
mod value;
mod vm;

// The crate root: what nearly every host names. Everything else lives in the module of what it
// is for, reached by one path only; `tests/api_surface.rs` lists the root and holds it to 40.
pub use domain::{
    ContextSpec, DomainMailbox, DomainSpec, InterruptHandle, Report, ReportKind, ScriptDomain,
    ScriptHandle, ScriptStatus, ServiceError,
};
pub use error::{Error, Result};
pub use jobs::{Pool, Promise, PromiseStatus};
pub use principal::Phase;
pub use value::{FromMessage, IntoMessage, MapKey, Message};
pub use vm::{NativeMode, Plan};

pub mod actor {
    //! `@skein/worker` actors as the host sees them: how a domain's actors fail, and what one does
    //! after its handler fails.
    //!
    //! Spawning an actor needs the capability [`ACTOR_SPAWN`](crate::capability::ACTOR_SPAWN); the
    //! host chooses the [`FailurePolicy`] for all of a domain's actors with
    //! [`DomainSpec::actor_failures`](crate::DomainSpec::actor_failures) and reads each failure, an
    //! [`ActorError`], with
    //! [`ScriptDomain::take_actor_failures`](crate::ScriptDomain::take_actor_failures).
    //! `docs/embedding.md`, "Actors", has the whole story.
    //!
    //! ```
    //! use skein::actor::{ActorStage, FailurePolicy};
    //! use skein::capability::{CapabilityId, CapabilitySet, RootAuthority, ACTOR_SPAWN};
    //! use skein::{DomainSpec, Pool, ScriptDomain};
    //!
    //! let spawn = CapabilitySet::from_iter([CapabilityId::new(ACTOR_SPAWN)?]);
    //! let grant = RootAuthority::new().grant(spawn);
    //! let pool = Pool::new(1);
    //! let spec = DomainSpec::new("tools").grant(grant).actor_failures(FailurePolicy::Continue);
    //! let domain = ScriptDomain::new(&pool, spec)?;
    //! domain.eval(r#"
    //!     local w = require("@skein/worker").spawn {
    //!         name = "odd", source = "return function(n) error('odd') end",
    //!     }
    //!     w:send(1)
    //!     pcall(w.receive, w, 20)
    //! "#)?;
    //! assert_eq!(domain.take_actor_failures()[0].stage, ActorStage::Handler);
    //! # Ok::<(), Box<dyn std::error::Error>>(())
    //! ```

    pub use crate::domain::{ActorError, ActorStage, FailurePolicy, LiveActors};
}

pub mod capability {
    //! Capabilities: what a domain may do, granted by the host and only ever narrowed.
    //!
    //! The host holds the [`RootAuthority`], the only way to make a first [`Grant`], and gives it
    //! to a domain with [`DomainSpec::grant`](crate::DomainSpec::grant); without one every check is
    //! denied. A [`CapabilitySet`] of [`CapabilityId`]s only shrinks as it is delegated
    //! ([`OverDelegation`] otherwise). A native service checks at its entry with
    //! [`require_capability`], which answers for the task running on the calling thread; a
    //! command registered with
    //! [`ScriptDomain::register_command_requiring`](crate::ScriptDomain::register_command_requiring)
    //! is checked where a script calls it, a job's call on its worker too. The capabilities
    //! Skein's own modules check are the constants here ([`FILESYSTEM_READ`],
    //! [`FILESYSTEM_WRITE`], [`ACTOR_SPAWN`]).
    //!
    //! ```
    //! use skein::capability::{require_capability, CapabilityId, CapabilitySet, RootAuthority};
    //! use skein::{DomainSpec, Plan, Pool, ScriptDomain};
    //!
    //! let plan = Plan::new().function("observeInput", |lua, _| {
    //!     require_capability("input.observe")?; // a denial becomes the Luau error the script sees
    //!     lua.pack_multi(true)
    //! });
    //! let observe = CapabilitySet::from_iter([CapabilityId::new("input.observe")?]);
    //! let grant = RootAuthority::new().grant(observe);
    //! let pool = Pool::new(1);
    //! let game = DomainSpec::new("game").plan(plan.clone()).grant(grant);
    //! let game = ScriptDomain::new(&pool, game)?;
    //! game.eval("assert(observeInput())")?;
    //! let mods = ScriptDomain::new(&pool, DomainSpec::new("mods").plan(plan))?; // no grant
    //! assert!(mods.eval("observeInput()").is_err());
    //! # Ok::<(), Box<dyn std::error::Error>>(())
    //! ```

    pub use crate::domain::ACTOR_SPAWN;
    pub use crate::principal::capability::{
        require_capability, CapabilityDenied, CapabilityError, CapabilityId, CapabilitySet, Grant,
        InvalidCapability, OverDelegation, RootAuthority, FILESYSTEM_READ, FILESYSTEM_WRITE,
    };
}

pub mod diagnostic {
    //! Diagnostics: the failures a domain went on past (a handler that raised or ran out of budget,
    //! a refused emit, an undelivered route copy), sent to the host's [`DiagnosticSink`] as they
    //! happen, each with the [`Attribution`] of who was running.
    //!
    //! Set the sink with [`DomainSpec::diagnostics`](crate::DomainSpec::diagnostics). A failure
    //! that reached no awaiting code is also a [`Report`](crate::Report), taken with
    //! [`ScriptDomain::take_reports`](crate::ScriptDomain::take_reports).

    pub use crate::principal::{Attribution, Diagnostic, DiagnosticKind, DiagnosticSink, Severity};
}

pub mod event {
    //! Domain events: the bounds of a domain's event queue ([`EventLimits`]), where a raw event
    //! goes ([`EventTarget`]), why a post was refused with its payload handed back
    //! ([`PostRefused`], [`QueueBound`]), and what one drain did ([`EventReport`]).
    //!
    //! Events are posted through a [`DomainMailbox`](crate::DomainMailbox) from any thread and
    //! delivered on the domain's engine thread by
    //! [`ScriptDomain::drain_events`](crate::ScriptDomain::drain_events) or a frame.

    pub use crate::domain::EventReport;
    pub use crate::principal::{EventLimits, EventTarget, PostRefused, QueueBound};
}

pub mod frame {
    //! Driving a domain from the host's frame loop: what one
    //! [`advance`](crate::ScriptDomain::advance), [`frame`](crate::ScriptDomain::frame),
    //! [`run_phase`](crate::ScriptDomain::run_phase) or [`pump`](crate::ScriptDomain::pump) did,
    //! how long each handler took, the handler calls that still wait on pool work, and the
    //! [`FixedStep`] that turns wall time into steps.
    //!
    //! The crate's top example drives one; `docs/embedding.md`, "Driving a domain", says which call
    //! runs what.

    pub use crate::domain::{
        AdvanceReport, FixedStep, FrameReport, HandlerTiming, PhaseReport, PumpReport, StillWaiting,
    };
}

pub mod interface {
    //! The interfaces scripts compose with `@skein/interfaces`, as the host sees them:
    //! [`ScriptDomain::interfaces`](crate::ScriptDomain::interfaces) lists each one with its fields
    //! and who provided each.

    pub use crate::domain::{InterfaceField, InterfaceInfo};
}

pub mod job {
    //! Jobs from the host's side: the options of a host dispatch ([`JobOptions`]), why a job failed
    //! ([`JobFailure`], [`FailureKind`]), and the snapshots of registered jobs ([`JobInfo`],
    //! [`JobOrder`], [`JobStatus`], [`WorkerCalls`]) that
    //! [`ScriptDomain::jobs`](crate::ScriptDomain::jobs) answers.

    pub use crate::jobs::{JobInfo, JobOptions, JobOrder, JobStatus, WorkerCalls};
    pub use crate::vm::{FailureKind, JobFailure};
}

pub mod lifecycle {
    //! A domain's life across its generations: where it is ([`DomainState`]), what a restart or a
    //! reload loads ([`Load`]) and where a load failed ([`LoadStage`]), the [`Generation`] it makes
    //! and what work runs as ([`Principal`]: one generation of one domain, named by its
    //! [`DomainId`]), and the native resources a generation owns until it ends ([`ResourceId`],
    //! [`ResourceOwner`]).
    //!
    //! ```
    //! use skein::lifecycle::{DomainState, Load};
    //! use skein::{DomainSpec, Pool, ScriptDomain};
    //!
    //! let pool = Pool::new(1);
    //! let mut domain = ScriptDomain::new(&pool, DomainSpec::new("game"))?;
    //! let first = domain.generation();
    //! let second = domain.restart(Load::Nothing)?;
    //! assert!(second > first);
    //! domain.stop();
    //! assert_eq!(domain.state(), DomainState::Stopped);
    //! # Ok::<(), skein::Error>(())
    //! ```

    pub use crate::domain::{DomainState, Load, ResourceId, ResourceOwner};
    pub use crate::principal::{DomainId, Generation, Principal};
    pub use crate::vm::LoadStage;
}

pub mod log {
    //! `@skein/log` records as the host receives them: a [`LogSink`] gets each [`LogRecord`] on the
    //! thread whose VM wrote it. With the cargo feature `tracing`, `TracingSink` sends them, and a
    //! domain's diagnostics and profile events, to the `tracing` subscriber.

    #[cfg(feature = "tracing")]
    pub use crate::domain::TracingSink;
    pub use crate::principal::{LogLevel, LogRecord, LogSink};
}

pub mod message {
    //! What goes with a [`Message`](crate::Message): the errors of turning values into one and back
    //! ([`ConvertError`], Rust; [`TransferError`], Luau; [`DecodeError`], bytes), the [`Limits`] a
    //! transferable value keeps to, the [`Bytes`] a string or buffer holds (the `bytes` crate's
    //! type, so a host needs no dependency of its own to name it), the [`ResourceHandle`] a
    //! message may carry, [`Args`], every argument of a call as a typed service takes them,
    //! and, with the cargo feature `serde` (on by default), `Serde`, a serde type as a typed
    //! argument.
    //!
    //! ```
    //! use skein::message::{Bytes, ConvertError, ConvertErrorKind};
    //! use skein::{FromMessage, Message};
    //!
    //! let err: ConvertError = u8::try_from(Message::from(300)).unwrap_err();
    //! assert!(matches!(err.kind(), ConvertErrorKind::Mismatch { .. }));
    //! assert_eq!(err.to_string(), "value: expected an integer from 0 to 255, got the number 300");
    //!
    //! // A string's bytes, and a buffer's, read without a copy.
    //! let raw = Bytes::from_static(b"\x00\xff");
    //! assert_eq!(Bytes::from_message(Message::buffer(raw.clone()))?, raw);
    //! assert_eq!(Message::from(raw.clone()), Message::String(raw));
    //! # Ok::<(), ConvertError>(())
    //! ```

    pub use bytes::Bytes;

    #[cfg(feature = "serde")]
    pub use crate::value::Serde;
    pub use crate::value::{
        Args, ConvertError, ConvertErrorKind, DecodeError, DecodeErrorKind, Limits, ResourceHandle,
        TransferError, TransferErrorKind,
    };
}

pub mod profile {
    //! Profiling: the measured costs of a domain ([`ProfileEvent`], [`ProfileKind`], on the
    //! [`ProfileThread`] that paid each) sent to a [`ProfileSink`], and [`ChromeTrace`], a ready
    //! sink that writes them as Chrome trace-event JSON.
    //!
    //! ```
    //! use std::sync::Arc;
    //! use skein::profile::ChromeTrace;
    //! use skein::{DomainSpec, Pool, ScriptDomain};
    //!
    //! let trace = Arc::new(ChromeTrace::new());
    //! let pool = Pool::new(1);
    //! let domain = ScriptDomain::new(&pool, DomainSpec::new("main").profile(trace.clone()))?;
    //! domain.eval("return 1 + 1")?;
    //! drop(domain);
    //! let dir = tempfile::tempdir()?;
    //! trace.write_to(dir.path().join("trace.json"))?; // open it in ui.perfetto.dev
    //! # Ok::<(), Box<dyn std::error::Error>>(())
    //! ```

    pub use crate::domain::ChromeTrace;
    pub use crate::principal::{ProfileEvent, ProfileKind, ProfileSink, ProfileThread};
}

pub mod refusal {
    //! The rule a refused call broke: the small enums that [`Error`](crate::Error)'s refusal
    //! families carry, to match on without reading the text.
    //!
    //! ```
    //! use skein::refusal::SpecSetting;
    //! use skein::{ContextSpec, DomainSpec, Error};
    //!
    //! let err = DomainSpec::new("game").context(ContextSpec::new("")).unwrap_err();
    //! assert!(matches!(err, Error::Spec { setting: SpecSetting::Context, .. }));
    //! ```

    pub use crate::error::{DispatchRefusal, Halt, NameRefusal, ResourceRefusal, SpecSetting};
}

pub mod size {
    //! Byte sizes as Skein reads them (`256M`, [`parse_size`]) and writes them (`64 KiB`,
    //! [`format_bytes`]), and the bound on one text Skein keeps for the host ([`MAX_TEXT_BYTES`]).
    //!
    //! ```
    //! use skein::size::{format_bytes, parse_size};
    //!
    //! assert_eq!(parse_size("64K"), Ok(64 << 10));
    //! assert_eq!(format_bytes(64 << 10), "64 KiB");
    //! ```

    pub use crate::ledger::{format_bytes, parse_size, MAX_TEXT_BYTES};
}

pub mod stats {
    //! Activity counters, copied out at the moment they are asked for: a domain's ([`DomainStats`],
    //! from [`ScriptDomain::stats`](crate::ScriptDomain::stats)) and each pool worker's
    //! ([`WorkerStats`], from [`Pool::stats`](crate::Pool::stats)), with the keys bound to a worker
    //! ([`HeldKey`]) and the `jobs.warm` runs it made ([`WarmRun`]).
    //!
    //! ```
    //! use skein::stats::WorkerStats;
    //! use skein::{DomainSpec, Pool, ScriptDomain};
    //!
    //! let pool = Pool::new(1);
    //! let domain = ScriptDomain::new(&pool, DomainSpec::new("hud"))?;
    //! domain.exec(r#"require("@skein/events").emit("nobody listens", 1)"#)?;
    //! assert_eq!(domain.stats().events_pending, 1);
    //! let workers: Vec<WorkerStats> = pool.stats();
    //! assert_eq!(workers.len(), 1);
    //! # Ok::<(), skein::Error>(())
    //! ```

    pub use crate::domain::DomainStats;
    pub use crate::executor::stats::{HeldKey, WarmRun, WorkerStats};
}

pub mod prelude {
    //! The usual embedding set, for `use skein::prelude::*;`: what a host that builds a pool and a
    //! domain, grants it capabilities, runs its scripts and trades values with them names most
    //! often. Everything else is reached through the module of what it is for
    //! (`skein::profile::ChromeTrace`, `skein::event::EventLimits`, ...); each bound is a constant
    //! of the type it bounds (`SharedQueueRef::MAX_CAPACITY`, `Plan::MAX_SOURCE_BYTES`).
    //!
    //! ```
    //! use skein::prelude::*;
    //!
    //! let pool = Pool::new(1);
    //! let domain = ScriptDomain::new(&pool, DomainSpec::new("game").plan(Plan::new()))?;
    //! let inbox = domain.shared().queue("inbox", SharedQueueRef::DEFAULT_CAPACITY)?;
    //! inbox.push(Message::Boolean(true))?;
    //! let got = domain.eval("return jobs.shared.queue('inbox'):tryPop() == true")?;
    //! assert_eq!(got, Message::Boolean(true));
    //! # Ok::<(), Error>(())
    //! ```

    pub use crate::capability::{CapabilityId, CapabilitySet, Grant, RootAuthority};
    pub use crate::job::JobOptions;
    pub use crate::shared::{SharedQueueRef, SharedTableRef};
    pub use crate::{
        ContextSpec, DomainMailbox, DomainSpec, Error, FromMessage, IntoMessage, MapKey, Message,
        Phase, Plan, Pool, Promise, PromiseStatus, Report, ReportKind, Result, ScriptDomain,
    };
}

/// Re-exported so hosts use the same mlua as Skein.
pub use mlua;

/// The executor's lock-free protocols, and the others the loom models in `loom-tests` check,
/// exposed only to them.
#[cfg(loom)]
#[doc(hidden)]
pub mod __loom {
    pub use crate::executor::handoff::{CancelOutcome, Handoff, HandoffState};
    pub use crate::executor::lanes::{Deliver, KeyLanes, Release, TooManyKeys, MAX_KEYS};
    pub use crate::executor::one_shot::{OneShot, Standing, Took};
    pub use crate::executor::sleep::{Sleep, SleepOutcome, AWAKE, SLEEPING};
    pub use crate::executor::stats::WorkerStats;
    pub use crate::executor::threads::{Executor, Poll, WorkerContext, WorkerLogic};
    pub use crate::executor::wake_queue::{wake_queue, Waited, WakeReceiver, WakeSender};
    pub use crate::shared::queue::{Delivery, PopNow, SharedQueue};
    pub use crate::shared::queue_ref::pop_blocking;
    pub use crate::shared::table::loom_support::{new_store, turn_taken};
    pub use crate::vm::budget::{
        CancelToken, InterruptHook, Interruption, OuterRun, RunTokens, Signal,
    };
}

/// The Rust blocks of the guides, compiled and run by `cargo test --doc` from the pages
/// themselves, so they cannot drift from the API. Private: they are no part of it.
#[cfg(doctest)]
mod doc_pages {
    /// The Rust blocks of `docs/embedding.md`.
    #[doc = include_str!("../docs/embedding.md")]
    pub struct EmbeddingGuide;

    /// The Rust block of `README.md`.
    #[doc = include_str!("../README.md")]
    pub struct Readme;
}
