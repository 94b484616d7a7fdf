//! The lowest row of `jobs`: plain data and the rules of the Luau calls' arguments, which no
//! other row's file is named by. What `opts` may say and how it is refused (`options.rs`), how a
//! `parallelFor` is cut into chunks (`chunking.rs`), finding an item's entry in its module
//! (`entry.rs`), the slot a Rust `Promise` waits on (`outcome_slot.rs`), engine-service names
//! (`service_names.rs`), the engine-event log (`event_log.rs`), and the data of registered jobs
//! that crosses threads (`registered/`).
//!
//! Nothing here names `protocol`, `luau`, `worker` or `host`: the protocol's types hold these,
//! never the other way round.

pub(super) mod chunking;
pub(super) mod entry;
pub(super) mod event_log;
pub(super) mod options;
pub(super) mod outcome_slot;
pub(super) mod registered;
pub(super) mod service_names;
