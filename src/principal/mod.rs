//! Who runs, what it may do, and where what it does is reported: the layer under `vm`.
//!
//! A [`Principal`] is one generation of one domain; every pool item, VM and task runs for one.
//! Its [`Authority`](capability::Authority) says what its code may do (`capability/`), and what
//! it does is reported through sinks the host sets: profile events (`profile.rs`), log records
//! (`log.rs`) and diagnostics (`diagnostic.rs`, with the [`Attribution`] naming who ran). Its
//! domain's event queue (`event_queue.rs`), which every mailbox and worker VM posts to, lives
//! here too, since work on any thread posts to it.
//!
//! Nothing here runs Luau or names a higher layer (`vm`, `shared`, `jobs`, `domain`): those
//! layers carry these values and report through these sinks, so they never call up to the
//! domain to do it (`tests/layers.rs`).

pub(crate) mod capability;
pub(crate) mod diagnostic;
pub(crate) mod event_queue;
mod identity;
mod log;
pub(crate) mod phase;
pub(crate) mod profile;

pub use diagnostic::{Attribution, Diagnostic, DiagnosticKind, DiagnosticSink, Severity};
pub use event_queue::{EventLimits, EventTarget, PostRefused, QueueBound};
pub use identity::{DomainId, Generation, Principal};
pub(crate) use log::LogSlot;
pub(crate) use log::Logs;
pub use log::{LogLevel, LogRecord, LogSink};
pub use phase::Phase;
pub(crate) use profile::Profile;
pub use profile::{ProfileEvent, ProfileKind, ProfileSink, ProfileThread};
